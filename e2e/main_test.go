package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/chronoscron/chronos/internal/buildtest"
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
	// The README's install line is `go build -o <path> ./cmd/chronos`; this
	// is it, without -race to keep the children fast.
	b, root, cleanup, err := buildtest.Chronos("chronos-e2e-bin-")
	if err != nil {
		return 1, err
	}
	defer cleanup()
	bin, repoRoot = b, root
	return m.Run(), nil
}
