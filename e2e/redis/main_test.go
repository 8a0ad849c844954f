package redise2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/chronoscron/chronos/internal/buildtest"
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
	b, _, cleanup, err := buildtest.Chronos("chronos-redise2e-")
	if err != nil {
		return 1, err
	}
	defer cleanup()
	bin = b
	return m.Run(), nil
}
