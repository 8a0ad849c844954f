package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/activation"
	"github.com/chronoscron/chronos/internal/buildtest"
)

// Helpers for tests that run the built binary as processes.

// buildChronos builds the binary into a temporary directory of tb.
func buildChronos(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("builds and runs the binary")
	}
	bin, _, cleanup, err := buildtest.Chronos("chronos-cmd-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cleanup)
	return bin
}

// proc is a started process with its output.
type proc struct {
	cmd  *exec.Cmd
	out  *buildtest.Buffer
	done chan struct{}
	err  error
}

// startProc starts bin with args and env (added to the test's environment),
// passing files as descriptors 3 onward. The process is killed at cleanup
// if it is still running.
func startProc(tb testing.TB, bin string, env []string, files []*os.File, args ...string) *proc {
	tb.Helper()
	p := &proc{out: &buildtest.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.ExtraFiles = files
	if err := p.cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
		if tb.Failed() {
			tb.Logf("output of %s:\n%s", strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// wait waits for the process to exit within d and returns its error.
func (p *proc) wait(tb testing.TB, d time.Duration) error {
	tb.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		tb.Fatalf("process did not exit within %s; output:\n%s", d, p.out.String())
		return nil
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// waitHTTP polls url until it answers 200 (the process is up) or d passes.
func waitHTTP(tb testing.TB, url string, d time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not ready after %s: %v", url, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// listenerFile returns a listening socket and its descriptor, the way a
// systemd socket unit holds the agent's port while the agent is stopped.
func listenerFile(tb testing.TB) (*net.TCPListener, *os.File) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close(); _ = ln.Close() })
	return ln.(*net.TCPListener), f
}

// waitConnection blocks until a connection is pending on the listening
// socket f, without accepting it: what systemd does before starting a
// socket-activated service. A listening socket is readable when a connection
// waits in its backlog.
func waitConnection(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var (
			n    int
			serr error
		)
		err := rc.Control(func(fd uintptr) {
			var set syscall.FdSet
			set.Bits[fd/64] |= 1 << (fd % 64)
			tv := syscall.Timeval{Usec: 100_000} // to notice ctx
			n, serr = syscall.Select(int(fd)+1, &set, nil, nil, &tv)
		})
		switch {
		case err != nil:
			return err
		case serr != nil && serr != syscall.EINTR:
			return serr
		case n > 0:
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// activationEnv is the environment of a socket-activated agent: one socket
// at fd 3. LISTEN_PID cannot name a child before it starts, so the test
// uses the documented escape hatch.
func activationEnv() []string {
	return []string{"LISTEN_FDS=1", activation.EnvListenPIDAny + "=1"}
}

func writeFile(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
}

func agentYAML(home, portal, callback, audience string) string {
	return fmt.Sprintf(`home: %s
listen: 127.0.0.1:1
cron:
  provider: chronos
  chronos:
    portal_url: %s
    callback_url: %s
    expected_audience: %s
    nas_jwks_url: %s/.well-known/jwks.json
    access_token_file: token
`, home, portal, callback, audience, portal)
}
