// Package secretfile reads the files that hold secrets (tokens, keys,
// passwords, URLs with a password) and tells when one is exposed: readable
// by the file's group or by others. The product writes its own secret files
// with mode Perm in directories it creates with mode DirPerm; a file an
// operator made is read whatever its mode, and an exposed one is reported
// (see Warner), not refused, so that a deployment that ran before keeps
// starting.
package secretfile

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"sync"
)

// Perm is the mode of a secret file the product writes: read and write for
// the owner only.
const Perm fs.FileMode = 0o600

// DirPerm is the mode of a directory of secrets the product creates.
const DirPerm fs.FileMode = 0o700

// Exposure is a secret file that its group or others may read.
type Exposure struct {
	// Path is the file as it was named.
	Path string
	// Mode is its permission bits when it was read.
	Mode fs.FileMode
}

// MarshalJSON writes the exposure as {"path", "mode" (octal, "0644"),
// "fix"}.
func (e Exposure) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Path string `json:"path"`
		Mode string `json:"mode"`
		Fix  string `json:"fix"`
	}{e.Path, fmt.Sprintf("%04o", e.Mode.Perm()), e.Fix()})
}

// Fix is the command that makes the file private.
func (e Exposure) Fix() string { return "chmod 600 " + e.Path }

// String says which file is exposed, its mode and the fix.
func (e Exposure) String() string {
	return fmt.Sprintf("secret file %s is readable by group or others (mode %04o): run %s", e.Path, e.Mode.Perm(), e.Fix())
}

// exposed reports whether mode lets group or others read the file. On
// Windows, where the permission bits say nothing of who may read a file,
// it never does.
func exposed(mode fs.FileMode) bool {
	return runtime.GOOS != "windows" && mode.Perm()&0o077 != 0
}

// Check reports f's exposure, from the mode of the open file (fstat): the
// mode of the very file read, whatever the path names by now. It returns nil
// when only the owner may read f.
func Check(f *os.File) (*Exposure, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret file %s: %w", f.Name(), err)
	}
	if !exposed(info.Mode()) {
		return nil, nil
	}
	return &Exposure{Path: f.Name(), Mode: info.Mode().Perm()}, nil
}

// Read returns the content of the secret file at path and, when its group
// or others may read it, its exposure (nil otherwise). Errors name path.
func Read(path string) ([]byte, *Exposure, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	e, err := Check(f)
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	return data, e, nil
}

// Inspect reports the exposure of the secret file at path without reading
// it: nil when only the owner may read it. A missing file is an error
// matching fs.ErrNotExist.
func Inspect(path string) (*Exposure, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Check(f)
}

// Warner logs each exposure once: a file re-read at every reload is
// reported the first time, and again only when its mode changes. The zero
// value is ready to use; it is safe for concurrent use.
type Warner struct {
	mu     sync.Mutex
	warned map[string]fs.FileMode
}

// Warn logs e at WARN on log, naming the file, its mode and the fix, unless
// e is nil or was logged before with the same mode. It reports whether it
// logged.
func (w *Warner) Warn(log *slog.Logger, e *Exposure) bool {
	if e == nil {
		return false
	}
	w.mu.Lock()
	if mode, ok := w.warned[e.Path]; ok && mode == e.Mode {
		w.mu.Unlock()
		return false
	}
	if w.warned == nil {
		w.warned = map[string]fs.FileMode{}
	}
	w.warned[e.Path] = e.Mode
	w.mu.Unlock()
	log.Warn("secret file is readable by group or others: run the fix",
		"file", e.Path, "mode", fmt.Sprintf("%04o", e.Mode.Perm()), "fix", e.Fix())
	return true
}

// warner is the process's Warner, for Warn.
var warner Warner

// Warn logs each exposure of es at WARN on log, each file once per process
// (see Warner).
func Warn(log *slog.Logger, es ...Exposure) {
	for i := range es {
		warner.Warn(log, &es[i])
	}
}
