package redistest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// MissingHint is the one-line failure a Redis test reports when there is no
// redis-server to start and TEST_REDIS_URL is not set.
const MissingHint = "redis-server not found: install it (apt-get install redis-server) or set TEST_REDIS_URL"

// EnvURL names the environment variable that points tests at an existing
// Redis instead of a throwaway one.
const EnvURL = "TEST_REDIS_URL"

// startTimeout bounds how long a server may take to answer PING after start.
const startTimeout = 10 * time.Second

// Options configure a dedicated server started with Start.
type Options struct {
	// AOF turns the append-only file on with appendfsync always, so every
	// write a client saw acknowledged survives a kill and restart.
	AOF bool
	// Port is the loopback port to listen on; 0 picks a free one. The port is
	// kept across Restart either way.
	Port int
	// Dir is the working directory (AOF and logs); empty means a new
	// temporary directory removed at the end of the test.
	Dir string
	// Cluster starts the server in cluster mode (a Redis Cluster node with
	// no slots until StartCluster assigns them), its cluster bus on a free
	// port of its own.
	Cluster bool
	// ClusterNodeTimeout is the cluster-node-timeout of a Cluster node:
	// how long a node may not answer before the others fail it over.
	// Default 3s.
	ClusterNodeTimeout time.Duration
	// ClusterPartialCoverage sets cluster-require-full-coverage no: the
	// masters that are up keep serving their slots while another master's
	// slots have no node (between its failure and its replica's
	// promotion), as a Redis Cluster under Chronos should run.
	ClusterPartialCoverage bool
}

// Server is a redis-server process owned by a test.
type Server struct {
	opts   Options
	binary string
	port   int
	bus    int // cluster bus port (Options.Cluster)
	dir    string

	mu      sync.Mutex
	started bool // it ran once: its port is fixed from now on
	paused  bool // stopped by SIGSTOP until Resume
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd has been waited for
}

// Start launches a dedicated redis-server for t with opts and stops it at the
// end of the test. It fails t with MissingHint when redis-server is missing.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(MissingHint)
	}
	dir := opts.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	s := &Server{opts: opts, binary: bin, port: opts.Port, dir: dir}
	if err := s.start(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// startServer launches a server outside of any test (for the shared one).
func startServer(opts Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(MissingHint)
	}
	s := &Server{opts: opts, binary: bin, port: opts.Port, dir: opts.Dir}
	if err := s.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Addr is the host:port of the server.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop shuts the server down cleanly (SHUTDOWN, then SIGTERM, then SIGKILL)
// and waits for it to exit. Stopping a stopped server does nothing; a paused
// one is resumed first.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	s.resumeLocked()
	_ = command(s.Addr(), "SHUTDOWN", time.Second)
	return s.waitOrKill(5 * time.Second)
}

// Pause freezes the server with SIGSTOP, as a hung or partitioned server
// looks to its clients: connections are accepted by the kernel and requests
// buffered, but nothing is answered until Resume (which then executes what
// was buffered).
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: pause: server not running")
	}
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redistest: pause: %w", err)
	}
	s.paused = true
	return nil
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: resume: server not running")
	}
	return s.resumeLocked()
}

// resumeLocked sends SIGCONT to a paused server; s.mu is held.
func (s *Server) resumeLocked() error {
	if !s.paused {
		return nil
	}
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redistest: resume: %w", err)
	}
	s.paused = false
	return nil
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.paused = nil, false
	return nil
}

// Restart starts the server again on the same port and directory after Stop
// or Kill (with AOF on, the data comes back); on a running server it kills it
// first.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.start()
}

// waitOrKill waits up to d for the process to exit, then kills it. s.mu is held.
func (s *Server) waitOrKill(d time.Duration) error {
	select {
	case <-s.done:
	case <-time.After(d):
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(d):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	}
	s.cmd, s.paused = nil, false
	return nil
}

// start launches the process and waits until it answers PING.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("redistest: server already running")
	}
	var lastErr error
	// A free port found by listening may be taken again before redis binds
	// it; try a few times with a new port when none was fixed.
	for try := 0; try < 5; try++ {
		// A restart keeps its port: clients hold its address.
		if s.opts.Port == 0 && !s.started && (s.port == 0 || try > 0) {
			p, err := freePort()
			if err != nil {
				return err
			}
			s.port = p
			if s.opts.Cluster {
				if s.bus, err = freePort(); err != nil {
					return err
				}
			}
		}
		lastErr = s.launch()
		if lastErr == nil {
			s.started = true
			return nil
		}
		if s.opts.Port != 0 || s.started {
			break
		}
	}
	return lastErr
}

// launch runs redis-server once on s.port. s.mu is held.
func (s *Server) launch() error {
	logPath := filepath.Join(s.dir, "redis.log")
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", logPath,
		"--daemonize", "no",
		"--save", "",
		"--protected-mode", "no",
	}
	if s.opts.Cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(cmp.Or(s.opts.ClusterNodeTimeout, 3*time.Second).Milliseconds(), 10), "--cluster-port", strconv.Itoa(s.bus))
		if s.opts.ClusterPartialCoverage {
			args = append(args, "--cluster-require-full-coverage", "no")
		}
	}
	if s.opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(s.binary, args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	deadline := time.Now().Add(startTimeout)
	backoff := 2 * time.Millisecond
	for {
		err := command(s.Addr(), "PING", 200*time.Millisecond)
		if err == nil {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start on port %d: %s", s.port, logTail(logPath))
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer within %v: %w", s.port, startTimeout, err)
		}
		// Readiness poll: wait for the server or for its exit, whichever first.
		select {
		case <-done:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 50*time.Millisecond)
	}
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// command sends one inline command and reads a simple reply; a PING must
// answer +PONG. SHUTDOWN's closed connection counts as success.
func command(addr, cmd string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if cmd == "SHUTDOWN" {
		return nil
	}
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}

// logTail returns the last lines of the server log for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}
