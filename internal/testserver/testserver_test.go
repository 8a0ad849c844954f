package testserver_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/internal/testserver"
)

// fatalTB records Fatal instead of ending the test.
type fatalTB struct {
	testing.TB
	fatal []string
}

func (f *fatalTB) Helper()           {}
func (f *fatalTB) Fatal(args ...any) { f.fatal = append(f.fatal, fmt.Sprint(args...)) }

func TestSharedStartsOnceAndStopsOnce(t *testing.T) {
	t.Setenv("TESTSERVER_TEST_URL", "")
	var starts, stops int
	s := &testserver.Shared{EnvURL: "TESTSERVER_TEST_URL", Start: func() (string, func(), error) {
		starts++
		return "redis://127.0.0.1:1", func() { stops++ }, nil
	}}
	var wg sync.WaitGroup
	urls := make([]string, 8)
	for i := range urls {
		wg.Go(func() { urls[i] = s.URL(t) })
	}
	wg.Wait()
	for i, u := range urls {
		if u != "redis://127.0.0.1:1" {
			t.Errorf("URL #%d = %q", i, u)
		}
	}
	if starts != 1 {
		t.Errorf("started %d times, want once", starts)
	}
	s.Shutdown()
	s.Shutdown()
	if stops != 1 {
		t.Errorf("stopped %d times, want once", stops)
	}
}

func TestSharedPrefersTheEnvironment(t *testing.T) {
	t.Setenv("TESTSERVER_TEST_URL", "postgres://elsewhere/db")
	s := &testserver.Shared{EnvURL: "TESTSERVER_TEST_URL", Start: func() (string, func(), error) {
		t.Error("started a server although the environment names one")
		return "", nil, errors.New("unexpected")
	}}
	if u := s.URL(t); u != "postgres://elsewhere/db" {
		t.Errorf("URL = %q, want the environment's", u)
	}
	s.Shutdown() // nothing to stop: must not panic
}

func TestSharedFailsEveryTestWhenStartFails(t *testing.T) {
	t.Setenv("TESTSERVER_TEST_URL", "")
	starts := 0
	s := &testserver.Shared{EnvURL: "TESTSERVER_TEST_URL", Start: func() (string, func(), error) {
		starts++
		return "", nil, errors.New("server not found: install it")
	}}
	for range 2 {
		f := &fatalTB{TB: t}
		s.URL(f)
		if len(f.fatal) != 1 || f.fatal[0] != "server not found: install it" {
			t.Errorf("failures %q, want the start error once", f.fatal)
		}
	}
	if starts != 1 {
		t.Errorf("started %d times, want once", starts)
	}
}
