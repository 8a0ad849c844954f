// Package atomicfile writes files so that a reader, or the next start after a
// crash, sees either the old content or the new one, never a part of it: the
// data goes to a temporary file in the same directory, is fsynced, renamed
// over the target, and the directory is fsynced so the rename itself
// survives a crash.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Replace writes data to path, replacing any file there, with mode perm.
// On an error the file at path is left as it was.
func Replace(path string, data []byte, perm fs.FileMode) error {
	dir, tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

// Create writes data to a new file path with mode perm; it fails with an
// error matching fs.ErrExist when path exists. Like Replace, the data is
// written and fsynced under a temporary name first, so path appears whole or
// not at all; it is then linked into place, which refuses an existing path.
func Create(path string, data []byte, perm fs.FileMode) error {
	dir, tmp, err := writeTemp(path, data, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", path, err)
	}
	return nil
}

// writeTemp writes data with mode perm to a new temporary file in path's
// directory, fsynced and closed, and returns the directory and the file's
// name, for Replace and Create to move into place. On an error nothing is
// left behind.
func writeTemp(path string, data []byte, perm fs.FileMode) (dir, tmp string, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	if err := fill(f, data, perm); err != nil {
		_ = os.Remove(f.Name())
		return "", "", fmt.Errorf("write %s: %w", path, err)
	}
	return dir, f.Name(), nil
}

// fill sets f's mode, writes data, fsyncs and closes f.
func fill(f *os.File, data []byte, perm fs.FileMode) error {
	err := f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// SyncDir fsyncs the directory dir, making the creation, removal or rename
// of its entries durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Probe checks that a file can be created, written, synced and removed in
// dir: it fails on a read-only file system, a full disk, a directory the
// process may not write, or a path that is no directory. The error says
// "<dir> is not writable".
func Probe(dir string) error {
	f, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	name := f.Name()
	_, werr := f.Write([]byte("probe\n"))
	serr := f.Sync()
	cerr := f.Close()
	rerr := os.Remove(name)
	if err := errors.Join(werr, serr, cerr, rerr); err != nil {
		return fmt.Errorf("%s is not writable: %w", dir, err)
	}
	return nil
}
