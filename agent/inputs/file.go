package inputs

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
)

// FileResolver reads file:///ABSOLUTE/PATH: one item per non-empty line
// not starting with #, at most MaxBytes.
type FileResolver struct{}

// Check requires an absolute path and no host, query or fragment.
func (FileResolver) Check(_ context.Context, u *url.URL) error {
	switch {
	case u.Host != "" && u.Host != "localhost":
		return fmt.Errorf("%w: %s: a file input names a local file (file:///path)", ErrInvalid, u)
	case u.Path == "" || !filepath.IsAbs(u.Path):
		return fmt.Errorf("%w: %s: the path must be absolute (file:///path)", ErrInvalid, u)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: %s: a file input takes no query or fragment", ErrInvalid, u)
	}
	return nil
}

// Resolve reads the file's lines.
func (FileResolver) Resolve(_ context.Context, u *url.URL) ([]string, error) {
	f, err := os.Open(u.Path)
	if err != nil {
		return nil, fmt.Errorf("inputs: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("inputs: read %s: %w", u.Path, err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("inputs: %s is larger than %d bytes", u.Path, MaxBytes)
	}
	return Lines(b), nil
}
