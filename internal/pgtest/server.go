package pgtest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StopMode is how Server.Stop shuts PostgreSQL down; the modes are those of
// `pg_ctl stop -m`.
type StopMode string

const (
	// Smart waits for every client to disconnect (SIGTERM).
	Smart StopMode = "smart"
	// Fast ends every session, then checkpoints (SIGINT).
	Fast StopMode = "fast"
	// Immediate ends at once, with no checkpoint: the next start recovers
	// from the write-ahead log as after a crash (SIGQUIT).
	Immediate StopMode = "immediate"
)

// signal returns the signal the postmaster takes for mode.
func (m StopMode) signal() (syscall.Signal, error) {
	switch m {
	case Smart:
		return syscall.SIGTERM, nil
	case Fast:
		return syscall.SIGINT, nil
	case Immediate:
		return syscall.SIGQUIT, nil
	}
	return 0, fmt.Errorf("pgtest: stop mode %q: want smart, fast or immediate", m)
}

// Server is a PostgreSQL cluster of one test's own, which the test may stop,
// start again and freeze; its URL stays the same throughout. Unlike URL's
// shared server it is always a throwaway cluster (TEST_POSTGRES_URL does not
// replace it), so it needs PostgreSQL installed. Its methods are safe for
// concurrent use.
type Server struct {
	mu     sync.Mutex
	c      *cluster
	paused []int // the processes Pause stopped, the postmaster first
}

// Start starts a new cluster for t, which stops it and removes its
// directory when it ends; it fails t when the cluster cannot start.
func Start(t testing.TB) *Server {
	t.Helper()
	c, err := start()
	if err != nil {
		t.Fatal(err.Error())
	}
	s := &Server{c: c}
	t.Cleanup(s.close)
	return s
}

// URL returns the server's postgres:// URL (database postgres, user
// postgres, no password).
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.url()
}

// Pid returns the postmaster's pid, 0 while the server is stopped.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return 0
	}
	return s.c.pid
}

// runningLocked tells whether the postmaster is up.
func (s *Server) runningLocked() bool {
	select {
	case <-s.c.done:
		return false
	default:
		return s.c.pid > 0
	}
}

// Stop shuts the server down as `pg_ctl stop -m mode` does and returns once
// the postmaster has exited. A postmaster that has not exited after 10 s is
// killed, and Stop says so.
func (s *Server) Stop(mode StopMode) error {
	sig, err := mode.signal()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return errors.New("pgtest: stop: the server is not running")
	}
	if err := s.resumeLocked(); err != nil {
		return err
	}
	if err := syscall.Kill(s.c.pid, sig); err != nil {
		return fmt.Errorf("pgtest: stop: %w", err)
	}
	select {
	case <-s.c.done:
		return nil
	case <-time.After(stopTimeout):
		_ = syscall.Kill(s.c.pid, syscall.SIGKILL)
		<-s.c.done
		return fmt.Errorf("pgtest: stop -m %s: the postmaster was still running after %s and was killed", mode, stopTimeout)
	}
}

// Start starts a stopped server again on the same port and data, and
// returns once it accepts connections (after recovery, when it stopped in
// Immediate mode).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runningLocked() {
		return errors.New("pgtest: start: the server is running")
	}
	return s.c.relaunch()
}

// Pause freezes the postmaster and every backend and auxiliary process
// (SIGSTOP): connections stay open and new ones are queued by the kernel,
// but nothing answers until Resume. It needs Linux.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.runningLocked() {
		return errors.New("pgtest: pause: the server is not running")
	}
	if s.paused != nil {
		return errors.New("pgtest: pause: the server is paused already")
	}
	// The postmaster first, so that it forks no process that the list
	// below would miss.
	if err := syscall.Kill(s.c.pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgtest: pause: %w", err)
	}
	s.paused = []int{s.c.pid}
	children, err := childPids(s.c.pid)
	if err != nil {
		_ = s.resumeLocked()
		return fmt.Errorf("pgtest: pause: %w", err)
	}
	for _, pid := range children {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err == nil {
			s.paused = append(s.paused, pid)
		}
	}
	return nil
}

// Resume lets the processes Pause froze run again (SIGCONT); it does
// nothing when the server is not paused.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumeLocked()
}

func (s *Server) resumeLocked() error {
	var errs []error
	// The children first: the postmaster finds them as it left them.
	for i := len(s.paused) - 1; i >= 0; i-- {
		if err := syscall.Kill(s.paused[i], syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	s.paused = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgtest: resume: %w", err)
	}
	return nil
}

// LogTail returns the end of the server's log, for a failing test to show.
func (s *Server) LogTail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c.logTail()
}

// close resumes a paused server, stops it and removes its directory.
func (s *Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.resumeLocked(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	s.c.stop()
}
