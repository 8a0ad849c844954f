package localapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/internal/apitest"
)

const token = "0123456789abcdef0123456789abcdef"

// env is a runtime with its local API on a loopback listener.
type env struct {
	rt   *agent.Runtime
	api  *localapi.Server
	base string
	home string
	// client checks every exchange against openapi.yaml (the event
	// stream, which it would read to its end, goes around it).
	client *http.Client
}

type envOptions struct {
	events localapi.EventOptions
	// hosts are the extra Host names the server accepts.
	hosts []string
	// config, when set, adjusts the runtime's config before it opens.
	config func(*agent.Config)
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	home := t.TempDir()
	cfg := agent.Config{Home: home, Retention: -1}
	if o.config != nil {
		o.config(&cfg)
	}
	rt, err := agent.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := localapi.New(localapi.Options{Runtime: rt, Token: token, Hosts: o.hosts, Events: o.events,
		Status: func(context.Context) (any, error) {
			return map[string]any{"provider": "builtin", "home": home, "running": true}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Close()
		ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &env{rt: rt, api: api, base: ts.URL, home: home, client: apitest.Client(t)}
}

// call sends a request; auth is "" (none), a bearer token, or a cookie
// header value "cookie:<value>". It returns the status and the body.
func (e *env) call(t *testing.T, method, path, auth, body string, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	return e.send(t, e.request(t, method, path, auth, body, hdr...))
}

// bad sends a request that breaks the API description on purpose: only
// the answer is checked against it.
func (e *env) bad(t *testing.T, method, path, auth, body string, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	return e.send(t, apitest.ExpectInvalid(e.request(t, method, path, auth, body, hdr...)))
}

func (e *env) request(t *testing.T, method, path, auth, body string, hdr ...string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case strings.HasPrefix(auth, "cookie:"):
		req.Header.Set("Cookie", localapi.SessionCookie+"="+strings.TrimPrefix(auth, "cookie:"))
	case auth != "":
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

func (e *env) send(t *testing.T, req *http.Request) (int, []byte, http.Header) {
	t.Helper()
	return sendWith(t, e.client, req)
}

// sendWith sends req with c and returns the answer's status, body and
// headers.
func sendWith(t *testing.T, c *http.Client, req *http.Request) (int, []byte, http.Header) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp.Header
}

// must calls and wants status, decoding the answer into out (when not nil).
func (e *env) must(t *testing.T, want int, method, path, body string, out any) {
	t.Helper()
	code, b, _ := e.call(t, method, path, token, body)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

func errorCode(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an error body: %s", b)
	}
	return e.Error
}

// sse is one event read from a stream.
type sse struct {
	id, event, data string
}

// stream reads events from GET /api/events until the returned stop is
// called.
type stream struct {
	resp   *http.Response
	events chan sse
}

// subscribe reads the event stream with the token.
func (e *env) subscribe(t *testing.T, lastID string) *stream {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.base+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{resp: resp, events: make(chan sse, 1024)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var cur sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if cur.event != "" {
					s.events <- cur
				}
				cur = sse{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				cur.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.resp.Body.Close() }

// next returns the next event of type typ (others are skipped), or fails.
func (s *stream) next(t *testing.T, typ string) sse {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("stream ended waiting for %s", typ)
			}
			if ev.event == typ {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", typ)
		}
	}
}

func shellSpec(id, command string) string {
	b, _ := json.Marshal(localapi.JobSpec{ID: id, Schedule: "@daily",
		Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: command}}})
	return string(b)
}
