// Package pgtest gives tests a real PostgreSQL.
//
// By default it starts one throwaway cluster per test binary (initdb and
// postgres from /usr/lib/postgresql/*/bin, the newest version, or from PATH)
// in a temporary directory, on a free loopback port, the first time a test
// asks for it, and stops it when the binary ends (call Main from TestMain).
// PostgreSQL refuses to run as root: as root the cluster's directory is
// given to the postgres user and the tools run with that user's ids.
// When the environment variable TEST_POSTGRES_URL is set, that server is
// used instead.
//
// The cluster does not outlive the test binary, however it ends: on Linux
// the postmaster is the binary's own child and the kernel kills it
// (SIGKILL) when the binary dies, even by SIGKILL or a test timeout, where
// no cleanup runs. Each cluster's directory names its owner (the test
// process's pid and start time); a later start removes the directories of
// owners that are gone, stopping what is left of their postmasters and
// their shared memory.
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
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/testserver"
)

// EnvURL names the environment variable that points tests at an existing
// PostgreSQL instead of a throwaway one.
const EnvURL = "TEST_POSTGRES_URL"

// MissingHint is the one-line failure of a test that needs PostgreSQL when
// there is none to start and TEST_POSTGRES_URL is not set.
const MissingHint = "postgresql not found: install it (apt-get install postgresql) or set TEST_POSTGRES_URL"

const (
	// dirPrefix starts the name of every cluster directory in the
	// temporary directory; the sweep looks only at these.
	dirPrefix = "pgtest-"
	// readyTimeout bounds how long a postmaster may take to accept
	// connections.
	readyTimeout = 30 * time.Second
	// stopTimeout bounds how long an immediate shutdown may take before
	// the postmaster is killed.
	stopTimeout = 10 * time.Second
	// launchTries is how many free ports a start tries: another process
	// may take the one found before the postmaster binds it.
	launchTries = 3
)

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

// Shutdown stops the shared cluster, if one was started, and removes its
// directory: for a TestMain that cannot hand its tests to Main. It is safe to
// call more than once.
func Shutdown() { shared.Shutdown() }

// URL returns the postgres:// URL of the server shared by the tests of this
// binary, failing t with MissingHint when there is none.
func URL(t testing.TB) string {
	t.Helper()
	return shared.URL(t)
}

// BinDir returns the directory of initdb and postgres.
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(a, b int) bool { return version(dirs[a]) > version(dirs[b]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		// A PATH entry may be a link to the real installation, whose
		// share directory postgres finds next to its own binary.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("pgtest: %s", MissingHint)
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// cluster is a throwaway PostgreSQL cluster: its directory holds the owner
// file, the data directory, the socket and the log.
type cluster struct {
	bin, dir string
	port     int
	cred     *syscall.Credential // run the tools as this user (root cannot run postgres)

	// set by launch
	pid  int           // the postmaster's
	done chan struct{} // closed when the postmaster has exited and been waited for
}

func (c *cluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

func (c *cluster) data() string { return filepath.Join(c.dir, "data") }

func (c *cluster) command(tool string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, tool), args...)
	cmd.Dir = c.dir // readable by the postgres user, unlike the test's own
	cmd.SysProcAttr = sysProcAttr(c.cred)
	return cmd
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
	root := os.TempDir()
	sweep(root, time.Now())
	dir, err := os.MkdirTemp(root, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("pgtest: temp dir: %w", err)
	}
	if err := writeOwner(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &cluster{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		if err := c.giveTo("postgres"); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := c.launch(); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// launch creates the cluster and starts its postmaster on a free port,
// returning once it accepts connections.
func (c *cluster) launch() error { return c.serve(true) }

// relaunch starts the postmaster of a cluster whose postmaster has exited
// again, on the port it had, returning once it accepts connections.
func (c *cluster) relaunch() error { return c.serve(false) }

// serve starts the postmaster, after initdb when fresh, returning once it
// accepts connections.
//
// Everything runs on one goroutine locked to its OS thread until the
// postmaster has exited: the kernel sends the parent-death signal when the
// thread that forked the child ends, not the process, and Go ends a thread
// when a goroutine exits while locked to it. The goroutine unlocks the
// thread once the postmaster has exited, so that the thread lives on: it
// may have forked other children of the test binary (processes a test
// starts, with a parent-death signal of their own) before it was locked,
// and its end would kill them.
func (c *cluster) serve(fresh bool) error {
	ready := make(chan error, 1)
	done := make(chan struct{})
	c.done, c.pid = done, 0
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread() // after the postmaster has exited
		defer close(done)
		if fresh {
			if err := c.run("initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
				ready <- err
				return
			}
		}
		var err error
		for try := 0; try < launchTries; try++ {
			if fresh {
				if c.port, err = freePort(); err != nil {
					break
				}
			}
			var cmd *exec.Cmd
			if cmd, err = c.startPostmaster(); err != nil {
				break
			}
			exited := make(chan struct{})
			go func() {
				_ = cmd.Wait()
				close(exited)
			}()
			if err = c.awaitReady(cmd.Process.Pid, exited); err == nil {
				c.pid = cmd.Process.Pid
				ready <- nil
				<-exited
				return
			}
			_ = cmd.Process.Kill() // when not ready in time
			<-exited
			if !fresh || !strings.Contains(c.logTail(), "already in use") {
				break // only a taken port is worth another try, and only a new one
			}
		}
		ready <- err
	}()
	return <-ready
}

// startPostmaster starts postgres on the cluster's port, its output going
// to the cluster's log.
func (c *cluster) startPostmaster() (*exec.Cmd, error) {
	log, err := os.OpenFile(c.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: log: %w", err)
	}
	defer log.Close() // the child has its own copy
	cmd := c.command("postgres", "-D", c.data(), "-c", "listen_addresses=127.0.0.1",
		"-p", strconv.Itoa(c.port), "-k", c.dir, "-c", "fsync=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: postgres: %w", err)
	}
	return cmd, nil
}

// awaitReady waits until the postmaster pid reports itself ready in its
// pid file (as pg_ctl -w does), until exited is closed, or readyTimeout.
func (c *cluster) awaitReady(pid int, exited <-chan struct{}) error {
	deadline := time.After(readyTimeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if p, err := readPidFile(c.data()); err == nil && p.pid == pid && p.ready {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pgtest: postgres exited before accepting connections\n%s", c.logTail())
		case <-deadline:
			return fmt.Errorf("pgtest: postgres not ready after %s\n%s", readyTimeout, c.logTail())
		case <-tick.C:
		}
	}
}

func (c *cluster) logPath() string { return filepath.Join(c.dir, "log") }

// logTail returns the end of the cluster's log, for errors.
func (c *cluster) logTail() string {
	b, _ := os.ReadFile(c.logPath())
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
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
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return nil
}

// stop shuts the postmaster down at once (SIGQUIT, PostgreSQL's immediate
// shutdown, which also removes its shared memory), kills it if that takes
// longer than stopTimeout, and removes the cluster's directory. It is safe
// to call when the postmaster is gone or never started.
func (c *cluster) stop() {
	if c.done != nil {
		select {
		case <-c.done:
		default:
			if c.pid > 0 { // else launch failed and the goroutine is ending
				_ = syscall.Kill(c.pid, syscall.SIGQUIT)
				select {
				case <-c.done:
				case <-time.After(stopTimeout):
					_ = syscall.Kill(c.pid, syscall.SIGKILL)
				}
			}
			<-c.done
		}
	}
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
