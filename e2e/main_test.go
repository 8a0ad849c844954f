package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chronoscron/chronos/internal/redistest"
)

// bin is the chronos binary built once for this test binary.
var bin string

// repoRoot is the module's root directory.
var repoRoot string

func TestMain(m *testing.M) {
	code, err := setupAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	redistest.Shutdown()
	os.Exit(code)
}

func setupAndRun(m *testing.M) (int, error) {
	root, err := findRoot()
	if err != nil {
		return 1, err
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "chronos-e2e-bin-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "chronos")
	// The README's install line is `go build -o <path> ./cmd/chronos`; this is
	// it, without -race to keep the children fast.
	build := exec.Command("go", "build", "-o", bin, "./cmd/chronos")
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 1, fmt.Errorf("go build ./cmd/chronos: %w", err)
	}
	return m.Run(), nil
}

// findRoot walks up from the working directory to the directory of go.mod.
func findRoot() (string, error) {
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
