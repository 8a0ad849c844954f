package localapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestJobFlexThroughTheAPI: a job's flexible window is taken by POST
// /api/jobs and PATCH /api/jobs/{id} as a duration string, shown in the
// job's JSON as jobs.json keeps it ("flex"), left out for a job without
// one, and a bad window is a 422 invalid_job that changes nothing.
func TestJobFlexThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	spec := `{"id":"f","schedule":"every 1h","flex":"10m","payload":{"kind":"shell","shell":{"command":"true"}}}`
	code, b, _ := e.call(t, "POST", "/api/jobs", token, spec)
	if code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, b)
	}
	if flexOf(t, b) != "10m0s" {
		t.Fatalf("added job %s, want flex 10m0s", b)
	}
	var shown json.RawMessage
	e.must(t, http.StatusOK, "GET", "/api/jobs/f", "", &shown)
	if flexOf(t, shown) != "10m0s" {
		t.Fatalf("shown job %s", shown)
	}
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("plain", "true"), &shown)
	if strings.Contains(string(shown), `"flex"`) {
		t.Fatalf("a job without a window shows one: %s", shown)
	}

	if code, b, _ = e.call(t, "PATCH", "/api/jobs/f", token, `{"flex":"30m"}`); code != http.StatusOK || flexOf(t, b) != "30m0s" {
		t.Fatalf("edit: %d %s", code, b)
	}
	jobs, lines := snapshot(t, e)
	for _, tc := range []struct{ name, method, path, body string }{
		{"negative", "POST", "/api/jobs", `{"id":"n","schedule":"every 1h","flex":"-1m","payload":{"kind":"shell","shell":{"command":"true"}}}`},
		{"over a day", "POST", "/api/jobs", `{"id":"d","schedule":"in 3d","flex":"25h","payload":{"kind":"shell","shell":{"command":"true"}}}`},
		{"a fraction of a second", "PATCH", "/api/jobs/f", `{"flex":"1.5s"}`},
		{"the whole period", "PATCH", "/api/jobs/f", `{"flex":"1h"}`},
	} {
		code, b, _ := e.bad(t, tc.method, tc.path, token, tc.body)
		if code != http.StatusUnprocessableEntity || errorCode(t, b) != "invalid_job" || !strings.Contains(string(b), "flex") {
			t.Errorf("%s: %d %s, want 422 invalid_job about flex", tc.name, code, b)
		}
	}
	code, b, _ = e.bad(t, "PATCH", "/api/jobs/f", token, `{"flex":"soon"}`)
	if code != http.StatusBadRequest {
		t.Errorf("not a duration: %d %s, want 400", code, b)
	}
	if j, l := snapshot(t, e); j != jobs || l != lines {
		t.Fatal("a refused window changed the home")
	}

	// "0s" removes the window.
	if code, b, _ = e.call(t, "PATCH", "/api/jobs/f", token, `{"flex":"0s"}`); code != http.StatusOK || strings.Contains(string(b), `"flex"`) {
		t.Fatalf("removing the window: %d %s", code, b)
	}
}

// TestClientSendsFlex: the client (what jobs add uses when an agent serves
// the home) carries the spec's window to the agent.
func TestClientSendsFlex(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	c := localapi.NewClient(e.base, token, nil)
	spec := agent.JobSpec{ID: "c", Schedule: "every 1h", Flex: 90 * time.Second,
		Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "true"}}}
	in, err := c.AddJob(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if in.Flex.Std() != 90*time.Second {
		t.Fatalf("added job flex %s", in.Flex.Std())
	}
	if got := localapi.SpecOf(spec).Spec(); got.Flex != spec.Flex {
		t.Fatalf("spec round trip flex %s", got.Flex)
	}
}

// flexOf returns the "flex" of a job's JSON, "" when absent.
func flexOf(t *testing.T, b []byte) string {
	t.Helper()
	var j struct {
		Flex string `json:"flex"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return j.Flex
}
