// Package buildtest builds the chronos binary for tests that start it as a
// real process: once per test binary, into a temporary directory, without the
// race detector so the children start and run fast.
package buildtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ModuleRoot walks up from the working directory to the directory of go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("buildtest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("buildtest: go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Chronos builds ./cmd/chronos of the module containing the working directory
// into a new temporary directory whose name starts with prefix. It returns the
// binary's path, the module root, and a cleanup that removes the directory.
func Chronos(prefix string) (bin, root string, cleanup func(), err error) {
	root, err = ModuleRoot()
	if err != nil {
		return "", "", nil, err
	}
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", "", nil, fmt.Errorf("buildtest: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	bin = filepath.Join(dir, "chronos")
	build := exec.Command("go", "build", "-o", bin, "./cmd/chronos")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", "", nil, fmt.Errorf("buildtest: go build ./cmd/chronos: %w", err)
	}
	return bin, root, cleanup, nil
}
