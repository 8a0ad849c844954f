package redistest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestSharedServerAndPrefixes(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping: %v", err)
	}
	a, b := redistest.Prefix(t), redistest.Prefix(t)
	if a == b {
		t.Fatalf("two prefixes of one test are equal: %q", a)
	}
	for _, p := range []string{a, b} {
		if strings.ContainsAny(p, "{}*?[] ") {
			t.Errorf("prefix %q has characters unsafe in keys or hash tags", p)
		}
	}
}

func TestDedicatedServerKeepsAcknowledgedWritesAcrossKill(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{AOF: true})
	c := redistest.ClientOf(t, s.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	addr := s.Addr()
	if err := s.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("ping succeeded on a killed server")
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if s.Addr() != addr {
		t.Fatalf("restart moved the server from %s to %s", addr, s.Addr())
	}
	got, err := c.Get(ctx, "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("after restart get k = %q, %v; want v", got, err)
	}
}

func TestDedicatedServerPausesAndResumes(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Options{})
	c := redistest.ClientOf(t, s.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatalf("pause: %v", err)
	}
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	err := c.Get(short, "k").Err()
	stop()
	if err == nil {
		t.Fatal("a paused server answered")
	}
	if err := s.Resume(); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("after resume get k = %q, %v; want v", got, err)
	}
	// Stop at the end of the test must not hang on a paused server.
	if err := s.Pause(); err != nil {
		t.Fatalf("pause again: %v", err)
	}
}

func TestMissingServerFailsWithHint(t *testing.T) {
	// Not parallel: it empties PATH.
	t.Setenv("PATH", t.TempDir())
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(ft, redistest.Options{})
	}()
	<-done
	if ft.msg != redistest.MissingHint {
		t.Fatalf("failure = %q, want %q", ft.msg, redistest.MissingHint)
	}
}

// fakeTB records a Fatal instead of ending the test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
