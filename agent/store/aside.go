package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// asides keeps copies of files that cannot be used (a corrupt jobs.json,
// record or journal; an oversize jobs.json) beside them, as
// <name>.corrupt-<timestamp>, for the operator: a file is never
// overwritten before a copy of it is kept.
type asides struct {
	now func() time.Time // names the copies
}

// corrupt keeps a copy of the undecodable file at path (jobs.json or a
// record) and returns ErrCorrupt. A content already kept aside is not
// copied again; a new content never replaces an older copy, even one named
// for the same second.
func (a asides) corrupt(path string, raw []byte, cause error) error {
	aside, err := a.keep(path, raw)
	return corruptError(path, cause, aside, err)
}

// corruptJournal keeps a copy of the journal at path whose line could not be
// decoded and returns ErrCorrupt.
func (a asides) corruptJournal(path string, cause error) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("store: %w: %s: %w (left untouched; reading it to copy it aside failed: %w)", ErrCorrupt, path, cause, err)
	}
	return a.corrupt(path, raw, cause)
}

// corruptError is the ErrCorrupt error of the file at path, undecodable
// for cause, whose copy was kept at aside, or not for kerr.
func corruptError(path string, cause error, aside string, kerr error) error {
	if kerr != nil {
		return fmt.Errorf("store: %w: %s: %w (left untouched; copying it aside failed: %w)", ErrCorrupt, path, cause, kerr)
	}
	return fmt.Errorf("store: %w: %s: %w (left untouched; copy kept at %s)", ErrCorrupt, path, cause, aside)
}

// keep returns the path of a copy of raw next to path, writing one
// unless an earlier copy holds the same bytes.
func (a asides) keep(path string, raw []byte) (string, error) {
	prefix := path + ".corrupt-"
	if old, err := filepath.Glob(prefix + "*"); err == nil {
		for _, p := range old {
			if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, raw) {
				return p, nil
			}
		}
	}
	base := prefix + a.now().UTC().Format("20060102T150405Z")
	for i := 1; i <= 1000; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		err := atomicfile.Create(name, raw, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("too many copies named %s-*", base)
}

// link makes path's file also <path>.corrupt-<timestamp> (a copy
// where a link is refused) and returns that name.
func (a asides) link(path string) (string, error) {
	base := path + ".corrupt-" + a.now().UTC().Format("20060102T150405Z")
	for i := 1; i <= 1000; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Link(path, name)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			err = copyFile(path, name)
		}
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("too many copies named %s-*", base)
}

// copyFile copies src to dst, a new file, streaming, and syncs it.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err = io.Copy(out, in); err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dst)
	}
	return err
}
