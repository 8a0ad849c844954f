package activation_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/activation"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestListenersIgnoresForeignVariables(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"unset", map[string]string{}},
		{"another pid", map[string]string{"LISTEN_FDS": "1", "LISTEN_PID": "1"}},
		{"no pid", map[string]string{"LISTEN_FDS": "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lns, err := activation.Listeners(activation.Options{Getenv: env(tt.env), PID: os.Getpid()})
			if err != nil || lns != nil {
				t.Fatalf("%v, %v", lns, err)
			}
		})
	}
	if _, err := activation.Listeners(activation.Options{Getenv: env(map[string]string{"LISTEN_FDS": "x"}), AnyPID: true}); err == nil {
		t.Fatal("a malformed LISTEN_FDS was accepted")
	}
}

// TestHelperProcess is the child of TestListenerTakesThePassedSocket: it
// takes fd 3 over and answers one connection.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("ACTIVATION_HELPER") != "1" {
		t.Skip("helper process only")
	}
	ln, err := activation.Listener(activation.Options{Getenv: os.Getenv, PID: os.Getpid()})
	if err != nil || ln == nil {
		fmt.Fprintf(os.Stderr, "no listener: %v\n", err)
		os.Exit(3)
	}
	// fd 3 itself is closed: runs started later must not inherit it.
	fd3Open := true
	if _, err := os.NewFile(3, "fd3").Stat(); err != nil {
		fd3Open = false
	}
	conn, err := ln.Accept()
	if err != nil {
		os.Exit(4)
	}
	if fd3Open {
		fmt.Fprintln(conn, "fd 3 still open")
		os.Exit(5)
	}
	fmt.Fprintln(conn, "pid", os.Getpid())
	_ = conn.Close()
	os.Exit(0)
}

func TestListenerTakesThePassedSocket(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// LISTEN_PID must be the child's own pid, which is known only once it
	// runs: a shell sets it to its pid ($$) and execs the child, keeping
	// the pid and the inherited fd 3.
	wrapped := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, os.Args[0], "-test.run=^TestHelperProcess$")
	wrapped.ExtraFiles = []*os.File{f}
	wrapped.Env = append(os.Environ(), "ACTIVATION_HELPER=1", "LISTEN_FDS=1")
	wrapped.Stderr = os.Stderr
	if err := wrapped.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if err := wrapped.Wait(); err != nil {
		t.Fatalf("child: %v (said %q)", err, line)
	}
	if want := "pid " + strconv.Itoa(wrapped.Process.Pid) + "\n"; line != want {
		t.Fatalf("child said %q, want %q", line, want)
	}
}

func TestWaitIdle(t *testing.T) {
	t.Parallel()
	const after = 30 * time.Millisecond
	t.Run("returns after a quiet period", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		if err := activation.WaitIdle(context.Background(), after, nil, func(context.Context) string { return "" }); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < after {
			t.Fatalf("idle after %s", d)
		}
	})
	t.Run("activity restarts the wait", func(t *testing.T) {
		t.Parallel()
		activity := make(chan struct{})
		done := make(chan time.Time, 1)
		go func() {
			_ = activation.WaitIdle(context.Background(), after, activity, func(context.Context) string { return "" })
			done <- time.Now()
		}()
		var last time.Time
		for range 5 {
			last = time.Now() // before the send: the wait restarts after it
			activity <- struct{}{}
			time.Sleep(after / 3)
		}
		if end := <-done; end.Sub(last) < after {
			t.Fatalf("exited %s after the last activity", end.Sub(last))
		}
	})
	t.Run("busy keeps it up", func(t *testing.T) {
		t.Parallel()
		var asked atomic.Int64
		err := activation.WaitIdle(context.Background(), after, nil, func(context.Context) string {
			if asked.Add(1) < 3 {
				return "a run is in flight"
			}
			return ""
		})
		if err != nil || asked.Load() != 3 {
			t.Fatalf("%v after %d questions", err, asked.Load())
		}
	})
	t.Run("context ends it", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := activation.WaitIdle(ctx, time.Hour, nil, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v", err)
		}
	})
}

// TestFromEnvClearsTheProtocol: whatever it finds, FromEnv removes the
// protocol's variables so that runs started later do not inherit them.
func TestFromEnvClearsTheProtocol(t *testing.T) {
	for k, v := range map[string]string{
		activation.EnvListenFDs: "1", activation.EnvListenPID: "1", // another process's socket
		activation.EnvListenFDNames: "fire", activation.EnvListenPIDAny: "",
	} {
		t.Setenv(k, v)
	}
	ln, err := activation.FromEnv()
	if ln != nil || err != nil {
		t.Fatalf("took another process's socket: %v, %v", ln, err)
	}
	for _, k := range []string{activation.EnvListenFDs, activation.EnvListenPID, activation.EnvListenFDNames, activation.EnvListenPIDAny} {
		if v, ok := os.LookupEnv(k); ok {
			t.Errorf("%s=%q is still set", k, v)
		}
	}
}
