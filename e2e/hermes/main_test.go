package hermese2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/internal/buildtest"
	"github.com/chronoscron/chronos/internal/pgtest"
)

var (
	// bin is the chronos binary, built once for this test binary.
	bin string
	// python is the interpreter that runs the Hermes-like agent.
	python string
)

func TestMain(m *testing.M) {
	code, err := setupAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: hermese2e:", err)
		code = 1
	}
	pgtest.Shutdown()
	os.Exit(code)
}

func setupAndRun(m *testing.M) (int, error) {
	py, err := findPython(os.Getenv("CHRONOS_TEST_PYTHON"))
	if err != nil {
		return 1, err
	}
	python = py
	b, _, cleanup, err := buildtest.Chronos("chronos-hermese2e-")
	if err != nil {
		return 1, err
	}
	defer cleanup()
	bin = b
	return m.Run(), nil
}

// pythonProbe is what the interpreter must manage: Python 3.8 or later with
// PyJWT's PyJWKClient and the cryptography backend (for RS and ES keys).
const pythonProbe = `import sys
assert sys.version_info >= (3, 8), "Python %d.%d is older than 3.8" % sys.version_info[:2]
import cryptography, jwt
from jwt import PyJWKClient
from jwt.algorithms import ECAlgorithm, RSAAlgorithm`

// findPython returns the interpreter to use: explicit when set (and then only
// it), else python3 on PATH, else /usr/bin/python3.
func findPython(explicit string) (string, error) {
	candidates := []string{explicit}
	if explicit == "" {
		candidates = nil
		if p, err := exec.LookPath("python3"); err == nil {
			candidates = append(candidates, p)
		}
		candidates = append(candidates, "/usr/bin/python3")
	}
	var tried []string
	for _, c := range candidates {
		out, err := exec.Command(c, "-c", pythonProbe).CombinedOutput()
		if err == nil {
			return c, nil
		}
		why := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(why, '\n'); i >= 0 {
			why = why[i+1:]
		}
		var ee *exec.ExitError
		if why == "" || !errors.As(err, &ee) {
			why = err.Error()
		}
		tried = append(tried, fmt.Sprintf("%s: %s", c, why))
	}
	return "", fmt.Errorf("no Python 3 with PyJWT and cryptography (%s); install them with `apt-get install python3-jwt python3-cryptography` (or `make deps`), or point CHRONOS_TEST_PYTHON at one",
		strings.Join(tried, "; "))
}
