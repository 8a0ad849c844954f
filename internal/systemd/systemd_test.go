package systemd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// listen opens a datagram socket standing in for the service manager's
// notify socket and points NOTIFY_SOCKET at it.
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

func read(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 256)
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no message from the process: %v", err)
	}
	return string(buf[:n])
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestReadyAndStopping(t *testing.T) {
	conn := listen(t)
	t.Setenv("WATCHDOG_USEC", "")
	Ready(context.Background(), quiet(), nil)
	if got := read(t, conn); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	Stopping(quiet())
	if got := read(t, conn); got != "STOPPING=1" {
		t.Fatalf("message %q, want STOPPING=1", got)
	}
}

func TestWatchdogFedOnlyWhileAlive(t *testing.T) {
	conn := listen(t)
	t.Setenv("WATCHDOG_USEC", "40000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	var sick atomic.Bool
	checked := make(chan struct{}, 64)
	alive := func(context.Context) error {
		select {
		case checked <- struct{}{}:
		default:
		}
		if sick.Load() {
			return errors.New("store down")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	Ready(ctx, quiet(), alive)
	if got := read(t, conn); got != "READY=1" {
		t.Fatalf("first message %q, want READY=1", got)
	}
	if got := read(t, conn); got != "WATCHDOG=1" {
		t.Fatalf("message %q, want WATCHDOG=1", got)
	}
	sick.Store(true)
	// Drain what was sent before the fault was seen, then wait for two
	// health checks that failed: nothing may arrive after them.
	for len(checked) > 0 {
		<-checked
	}
	<-checked
	<-checked
	if err := conn.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			break
		}
		_ = n // keep-alives sent before the fault was noticed
	}
	<-checked
	<-checked
	if err := conn.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, err := conn.Read(buf); err == nil {
		t.Fatalf("watchdog fed while unhealthy: %q", buf[:n])
	}
}

func TestOutsideSystemdDoesNothing(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "40000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	Ready(ctx, quiet(), nil) // must neither fail nor block
	Stopping(quiet())
}
