package redise2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chronoscron/chronos/internal/redistest"
)

// bin is the chronos binary, built once for this test binary.
var bin string

func TestMain(m *testing.M) {
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "redise2e:", err)
		code = 1
	}
	redistest.Shutdown()
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	root, err := moduleRoot()
	if err != nil {
		return 1, err
	}
	dir, err := os.MkdirTemp("", "chronos-redise2e-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "chronos")
	build := exec.Command("go", "build", "-o", bin, "./cmd/chronos")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("go build ./cmd/chronos: %w", err)
	}
	return m.Run(), nil
}

// moduleRoot walks up from the working directory to go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}
