package postgrese2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/chronoscron/chronos/internal/buildtest"
	"github.com/chronoscron/chronos/internal/pgtest"
)

// bin is the chronos binary, built once for this test binary.
var bin string

func TestMain(m *testing.M) {
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "postgrese2e:", err)
		code = 1
	}
	pgtest.Shutdown()
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	b, _, cleanup, err := buildtest.Chronos("chronos-postgrese2e-")
	if err != nil {
		return 1, err
	}
	defer cleanup()
	bin = b
	return m.Run(), nil
}
