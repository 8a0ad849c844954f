// Package pgtest gives tests a real PostgreSQL.
//
// By default it starts one throwaway cluster per test binary (initdb and
// pg_ctl from /usr/lib/postgresql/*/bin, the newest version, or from PATH)
// in a temporary directory, on a free loopback port, the first time a test
// asks for it, and stops it when the binary ends (call Main from TestMain).
// PostgreSQL refuses to run as root: as root the cluster's directory is
// given to the postgres user and the tools run as that user (runuser).
// When the environment variable TEST_POSTGRES_URL is set, that server is
// used instead.
//
// When PostgreSQL is not installed and TEST_POSTGRES_URL is not set, a test
// that needs it fails with MissingHint; it never skips.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/chronoscron/chronos/internal/testserver"
)

// EnvURL names the environment variable that points tests at an existing
// PostgreSQL instead of a throwaway one.
const EnvURL = "TEST_POSTGRES_URL"

// MissingHint is the one-line failure of a test that needs PostgreSQL when
// there is none to start and TEST_POSTGRES_URL is not set.
const MissingHint = "postgresql not found: install it (apt-get install postgresql) or set TEST_POSTGRES_URL"

// shared is the server shared by the tests of this binary.
var shared = &testserver.Shared{EnvURL: EnvURL, Start: func() (string, func(), error) {
	c, err := start()
	if err != nil {
		return "", nil, err
	}
	return c.url(), c.stop, nil
}}

// Main runs the tests of a package and then stops the shared cluster, if
// one was started, and removes its directory.
func Main(m *testing.M) { shared.Main(m) }

// URL returns the postgres:// URL of the server shared by the tests of this
// binary, failing t with MissingHint when there is none.
func URL(t testing.TB) string {
	t.Helper()
	return shared.URL(t)
}

// BinDir returns the directory of initdb and pg_ctl.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(a, b int) bool { return version(dirs[a]) > version(dirs[b]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("pgtest: %s", MissingHint)
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

type cluster struct {
	bin, dir string
	port     int
	asUser   string // run the tools as this user (root cannot run postgres)
}

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

func (c *cluster) command(tool string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, tool)
	if c.asUser != "" {
		return exec.Command("runuser", append([]string{"-u", c.asUser, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (c *cluster) run(tool string, args ...string) error {
	out, err := c.command(tool, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", tool, err, out)
	}
	return nil
}

func start() (*cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: temp dir: %w", err)
	}
	c := &cluster{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		if err := c.giveTo("postgres"); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if c.port, err = freePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := c.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", c.port, dir)
	if err := c.run("pg_ctl", "start", "-D", data, "-w", "-t", "30", "-l", filepath.Join(dir, "log"), "-o", opts); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// giveTo makes the cluster's directory the user's and runs the tools as it.
func (c *cluster) giveTo(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("pgtest: running as root needs the %s user: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(c.dir, uid, gid); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	c.asUser = name
	return nil
}

func (c *cluster) stop() {
	_ = c.run("pg_ctl", "stop", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w")
	_ = os.RemoveAll(c.dir)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
