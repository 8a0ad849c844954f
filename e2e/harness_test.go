package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/buildtest"
)

// proc is one chronos process started by a test.
type proc struct {
	t    *testing.T
	name string
	dir  string
	env  []string
	args []string

	cmd  *exec.Cmd
	out  *buildtest.Buffer
	done chan struct{}
	err  error // set when done is closed
}

// childEnv is the environment of child processes: the test's own, without
// any CHRONOS_ setting that could leak into them, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CHRONOS_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// startProc starts the chronos binary with args in dir. Its output (stdout
// and stderr together) is kept, and printed if the test fails. The process is
// killed when the test ends.
func startProc(t *testing.T, name, dir string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, dir: dir, env: env, args: args}
	p.launch()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("---- output of %s (%s):\n%s", p.name, strings.Join(p.args, " "), tail(p.out.String(), 6000))
		}
	})
	return p
}

func (p *proc) launch() {
	p.t.Helper()
	p.out = &buildtest.Buffer{}
	p.done = make(chan struct{})
	p.cmd = exec.Command(bin, p.args...)
	p.cmd.Dir = p.dir
	p.cmd.Env = childEnv(p.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := p.done
	go func() {
		p.err = p.cmd.Wait()
		close(done)
	}()
}

// restart starts the process again with the same arguments after it ended.
func (p *proc) restart() {
	p.t.Helper()
	select {
	case <-p.done:
	default:
		p.t.Fatalf("restart %s: it is still running", p.name)
	}
	prev := p.out.String()
	p.launch()
	_, _ = p.out.Write([]byte(prev + "---- restarted ----\n"))
}

// running reports whether the process has not ended.
func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *proc) kill() {
	if p.cmd == nil || p.cmd.Process == nil || !p.running() {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// eventually polls cond every 50 ms until it holds or within passes; then the
// test fails with what and cond's last explanation.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", within, what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// httpGet returns the status and body of a GET (status 0 on a transport error).
func httpGet(url string, header ...string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// waitReady waits until GET url answers 200, failing early if p ended.
func waitReady(t *testing.T, p *proc, url string, within time.Duration) {
	t.Helper()
	eventually(t, within, url+" to answer 200", func() (bool, string) {
		if p != nil && !p.running() {
			t.Fatalf("%s ended (%v) before %s was ready", p.name, p.err, url)
		}
		code, body := httpGet(url)
		return code == http.StatusOK, fmt.Sprintf("last answer %d %s", code, strings.TrimSpace(body))
	})
}

// cliResult is what one CLI invocation printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// chronos runs the binary once in dir and returns what it printed.
func chronos(t *testing.T, dir string, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv(env...)
	cmd.SysProcAttr = childAttr()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("chronos %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// mustChronos runs the binary and fails the test unless it exits 0.
func mustChronos(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	r := chronos(t, dir, env, args...)
	if r.code != 0 {
		t.Fatalf("chronos %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// writeFile writes data to dir/name with mode 0600.
func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// soak reports whether the long forms of the tests were asked for.
func soak() bool { return os.Getenv("CHRONOS_SOAK") == "1" }
