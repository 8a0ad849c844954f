// Package testserver keeps one server shared by the tests of a test binary:
// the one an environment variable points at, else a throwaway one started
// the first time a test asks for it and stopped when the binary ends. The
// helpers that give tests a real database (Redis, PostgreSQL) build on it.
package testserver

import (
	"os"
	"sync"
	"testing"
)

// StartFunc starts a throwaway server and returns its URL and how to stop
// it (stop also removes whatever the server left on disk).
type StartFunc func() (url string, stop func(), err error)

// Shared is a server shared by the tests of one binary. Its zero value is
// not usable: set EnvURL and Start. It is safe for concurrent use.
type Shared struct {
	// EnvURL names the environment variable that, when set, holds the URL
	// of an existing server to use instead of a throwaway one.
	EnvURL string
	// Start starts the throwaway server, at most once per binary.
	Start StartFunc

	once sync.Once
	mu   sync.Mutex
	stop func()
	url  string
	err  error
}

// URL returns the shared server's URL: EnvURL's value when it is set, else
// the URL of the server Start started on first use. When it could not be
// started, it fails t with Start's error, each time it is asked.
func (s *Shared) URL(t testing.TB) string {
	t.Helper()
	s.once.Do(func() {
		if u := os.Getenv(s.EnvURL); u != "" {
			s.url = u
			return
		}
		u, stop, err := s.Start()
		s.mu.Lock()
		s.url, s.stop, s.err = u, stop, err
		s.mu.Unlock()
	})
	if s.err != nil {
		t.Fatal(s.err.Error())
	}
	return s.url
}

// Shutdown stops the server Start started, if any; it is safe to call more
// than once.
func (s *Shared) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// Main runs the tests of a package, then Shutdown, and exits with the
// tests' code.
func (s *Shared) Main(m *testing.M) {
	code := m.Run()
	s.Shutdown()
	os.Exit(code)
}
