package store

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// DefaultMaxFileBytes is the size jobs.json may have when Options.MaxFile
// sets none: 16 MiB, some 30,000 jobs (NAS arms 1,000 per agent by
// default), while the memory reading it takes stays near 200 MiB.
const DefaultMaxFileBytes = 16 << 20

// ErrTooLarge is wrapped by the error of a file over its Limit; see
// TooLargeError.
var ErrTooLarge = errors.New("file too large")

// Limit caps the size of a file that is read whole into memory.
type Limit struct {
	// Bytes is the largest size accepted; zero or less takes the default of
	// whoever applies the limit.
	Bytes int64
	// Setting names, for errors, the configuration setting that sets Bytes
	// (e.g. "max_jobs_file_bytes"); empty names none.
	Setting string
}

// TooLargeError is the error of a file refused, unread, because it is
// larger than its Limit. It matches ErrTooLarge.
type TooLargeError struct {
	// Name is what the file is called in the message (a path, or "-").
	Name string
	// Size is the file's size, or a lower bound of it when it was read
	// from a stream (Stream is then true).
	Size   int64
	Stream bool
	// Limit is the limit it broke.
	Limit Limit
}

// Error names the file, its size, the limit and the setting that sets it.
func (e *TooLargeError) Error() string {
	size := fmt.Sprintf("is %d bytes", e.Size)
	if e.Stream {
		size = fmt.Sprintf("is more than %d bytes", e.Limit.Bytes)
	}
	msg := fmt.Sprintf("%s %s, over the limit of %d bytes", e.Name, size, e.Limit.Bytes)
	if e.Limit.Setting != "" {
		msg += " set by " + e.Limit.Setting
	}
	return msg
}

// Is reports whether target is ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// ReadLimited reads f whole unless it holds more than lim.Bytes bytes: the
// size is checked before anything is read (when f can be stat'ed as a
// regular file), and the read itself stops one byte past the limit, so a
// file that grows meanwhile, or a stream, is refused too. name names f in
// the error, a *TooLargeError.
func ReadLimited(f io.Reader, name string, lim Limit) ([]byte, error) {
	if st, ok := f.(interface{ Stat() (os.FileInfo, error) }); ok {
		if fi, err := st.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > lim.Bytes {
			return nil, &TooLargeError{Name: name, Size: fi.Size(), Limit: lim}
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, lim.Bytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > lim.Bytes {
		return nil, &TooLargeError{Name: name, Size: int64(len(b)), Stream: true, Limit: lim}
	}
	return b, nil
}
