package runner

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type buf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *buf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

var fire = time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)

// shellReq is a request of a run whose id is unique to the test: a kill
// finds a run's processes by the id in their environment, so two tests
// must not share one.
func shellReq(t *testing.T, sh *Shell, out *buf) Request {
	id := "run-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return Request{JobID: "job", RunID: id, FireAt: fire, Attempt: 1, Payload: Payload{Kind: KindShell, Shell: sh}, Output: out}
}

func TestShellRunner(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		sh       Shell
		wantErr  string
		wantCode int
		wantOut  string
	}{
		{"env", Shell{Command: `echo "$CHRONOS_JOB_ID $CHRONOS_RUN_ID $CHRONOS_FIRE_AT $EXTRA"`, Env: map[string]string{"EXTRA": "x"}}, "", 0, "job run-TestShellRunner-env 2026-06-01T09:00:00Z x\n"},
		{"argv", Shell{Argv: []string{"printf", "%s|", "a b", "c"}}, "", 0, "a b|c|"},
		{"exit status", Shell{Command: "echo oops >&2; exit 3"}, "exit status 3", 3, "oops\n"},
		{"dir", Shell{Command: "pwd", Dir: "/"}, "", 0, "/\n"},
		{"missing binary", Shell{Argv: []string{"/nonexistent/bin"}}, "start", -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := &buf{}
			res := (&ShellRunner{}).Run(context.Background(), shellReq(t, &tc.sh, out))
			if (res.Err == nil) != (tc.wantErr == "") || (res.Err != nil && !strings.Contains(res.Err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", res.Err, tc.wantErr)
			}
			if res.ExitCode != tc.wantCode || out.String() != tc.wantOut {
				t.Fatalf("code %d out %q", res.ExitCode, out.String())
			}
		})
	}
}

// TestShellTimeoutKillsTheGroup: a timeout kills the command and the
// children it started.
func TestShellTimeoutKillsTheGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	out := &buf{}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := (&ShellRunner{}).Run(ctx, shellReq(t, &Shell{Command: "sleep 30 & echo $! > " + pidFile + "; wait"}, out))
	if res.Err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %s", res.Err, time.Since(start))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d survived the timeout", pid)
		}
		time.Sleep(10 * time.Millisecond) // the kernel reaps asynchronously
	}
}

func TestCapWriter(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w := &CapWriter{W: &b, Limit: 10}
	n, err := w.Write([]byte("0123456789abcdef"))
	if err != nil || n != 16 || !w.Truncated() {
		t.Fatalf("n %d err %v", n, err)
	}
	w.Write([]byte("more"))
	if b.String() != "0123456789\n[output truncated]\n" {
		t.Fatalf("got %q", b.String())
	}
}

func TestShellValidate(t *testing.T) {
	t.Parallel()
	for _, p := range []Payload{
		{Kind: KindShell},
		{Kind: KindShell, Shell: &Shell{}},
		{Kind: KindShell, Shell: &Shell{Command: "x", Argv: []string{"y"}}},
		{Kind: KindShell, Shell: &Shell{Command: "x", Env: map[string]string{"A=B": "c"}}},
	} {
		if err := (&ShellRunner{}).Validate(p); err == nil {
			t.Errorf("accepted %+v", p.Shell)
		}
	}
}

func TestHTTPRunner(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case "/status":
			code, _ := strconv.Atoi(r.URL.Query().Get("code"))
			w.WriteHeader(code)
		case "/echo":
			b := new(bytes.Buffer)
			b.ReadFrom(r.Body)
			w.Write([]byte(r.Method + " " + r.Header.Get("X-Token") + " " + r.Header.Get("X-Chronos-Run-Id") + " " + b.String()))
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			w.Write([]byte("ok"))
		}
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name    string
		h       HTTP
		timeout time.Duration
		wantErr string
		wantOut string
	}{
		{"post with headers", HTTP{URL: srv.URL + "/echo", Body: "hi", Headers: map[string]string{"X-Token": "t"}}, 0, "", "POST t run1 hi"},
		{"redirect not followed", HTTP{URL: srv.URL + "/redirect"}, 0, "status 302 not accepted", ""},
		{"redirect accepted", HTTP{URL: srv.URL + "/redirect", Accept: []int{302}}, 0, "", "302"},
		{"redirect followed", HTTP{URL: srv.URL + "/redirect", FollowRedirects: true}, 0, "", "ok"},
		{"500 fails", HTTP{URL: srv.URL + "/status?code=500"}, 0, "status 500", ""},
		{"204 ok", HTTP{URL: srv.URL + "/status?code=204"}, 0, "", "204"},
		{"timeout", HTTP{URL: srv.URL + "/slow"}, 200 * time.Millisecond, "deadline", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			out := &buf{}
			res := (&HTTPRunner{}).Run(ctx, Request{JobID: "job", RunID: "run1", FireAt: fire, Payload: Payload{Kind: KindHTTP, HTTP: &tc.h}, Output: out})
			if (res.Err == nil) != (tc.wantErr == "") || (res.Err != nil && !strings.Contains(res.Err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", res.Err, tc.wantErr)
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Fatalf("output %q lacks %q", out.String(), tc.wantOut)
			}
		})
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	if _, err := r.Get("agent_turn"); !errors.Is(err, ErrUnknownKind) {
		t.Fatalf("err %v", err)
	}
	if err := r.Register("agent_turn", &ShellRunner{}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Kinds(), ","); got != "agent_turn,http,shell" {
		t.Fatalf("kinds %s", got)
	}
	if err := r.Validate(Payload{Kind: KindHTTP, HTTP: &HTTP{URL: "not a url"}}); err == nil {
		t.Fatal("bad url accepted")
	}
}
