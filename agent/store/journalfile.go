package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// journalFile is the journal file, kept open while it is the file at its
// path.
type journalFile struct {
	path, home string
	f          *os.File
	ino        uint64
	appendable bool // f was opened for appending
}

// openMode says whether journalFile may create the journal.
type openMode int

const (
	openToRead openMode = iota
	openToAppend
)

// open returns the journal, opened for appending when it can be
// (read-only otherwise), and its current size; a journal that does not
// exist is nil unless m is openToAppend, which creates it (and makes its
// name durable). The file stays open for the next calls while it is the
// one at the journal's path.
func (jf *journalFile) open(m openMode) (*os.File, fs.FileInfo, error) {
	path := jf.path
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) && m == openToRead {
		return nil, nil, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if err == nil && jf.f != nil && jf.ino == inode(fi) && (m == openToRead || jf.appendable) {
		return jf.f, fi, nil
	}
	if jf.f != nil {
		_ = jf.f.Close()
		jf.f = nil
	}
	created := err != nil
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	appendable := err == nil
	if err != nil && m == openToRead {
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if fi, err = f.Stat(); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if created {
		if err := atomicfile.SyncDir(jf.home); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("store: create %s: %w", path, err)
		}
	}
	jf.f, jf.ino, jf.appendable = f, inode(fi), appendable
	return f, fi, nil
}

// reset empties the journal once jobs.json holds all it records;
// it runs under the exclusive lock, after jobs.json was made durable, and
// returns what is then known of the journal. A journal that cannot be
// emptied keeps its lines, stale now: the next read skips them.
func (jf *journalFile) reset() journal {
	f, fi, err := jf.open(openToRead)
	if err != nil || f == nil {
		return journal{}
	}
	if fi.Size() > 0 && (!jf.appendable || f.Truncate(0) != nil) {
		return journal{}
	}
	return journal{ino: inode(fi)}
}

// close closes the file if it is open.
func (jf *journalFile) close() {
	if jf.f != nil {
		_ = jf.f.Close()
		jf.f = nil
	}
}
