package localapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/localapi"
	"github.com/chronoscron/chronos/agent/runner"
)

func specJSON(t *testing.T, s localapi.JobSpec) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sh(cmd string) runner.Payload {
	return runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: cmd}}
}

// A fanout run's children and reducer are served nested under it, by
// /children and by the parent_run_id filter; a workflow's job says its
// kind and each dependency's latest status.
func TestRunGraphThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	items := filepath.Join(t.TempDir(), "items.txt")
	if err := os.WriteFile(items, []byte("# photos\nalpha\nbravo\ncharlie\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("extract", "true"), nil)
	var fan localapi.JobInfo
	e.must(t, http.StatusCreated, "POST", "/api/jobs", specJSON(t, localapi.JobSpec{ID: "thumbs", Schedule: "@daily",
		Payload: sh(`echo "thumb $FANOUT_ITEM"; test "$FANOUT_ITEM" != bravo`), JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: "file://" + items, Concurrency: 2, PartialTolerance: 0.5,
			Reducer: &job.Reducer{Command: "echo reduced", RunOn: job.ReduceOnAnySuccess}}}), &fan)
	if fan.JobKind != "fanout" || fan.Fanout == nil || fan.Fanout.Concurrency != 2 {
		t.Fatalf("fanout job %+v", fan)
	}
	var wf localapi.JobInfo
	e.must(t, http.StatusCreated, "POST", "/api/jobs", specJSON(t, localapi.JobSpec{ID: "load", Schedule: "@daily",
		Payload: sh("true"), JobKind: job.JobKindWorkflow,
		Workflow: &job.Workflow{DependsOn: []string{"extract", "thumbs"}, Window: job.Duration(time.Hour)}}), &wf)
	if wf.JobKind != "workflow" || len(wf.Dependencies) != 2 || wf.Dependencies[0].State != agent.DepMissing ||
		wf.Dependencies[1].State != agent.DepMissing {
		t.Fatalf("workflow before any run: kind %q deps %+v", wf.JobKind, wf.Dependencies)
	}
	var plain localapi.JobInfo
	e.must(t, http.StatusOK, "GET", "/api/jobs/extract", "", &plain)
	if plain.JobKind != localapi.JobKindPlain || plain.Dependencies != nil {
		t.Fatalf("plain job: kind %q deps %+v", plain.JobKind, plain.Dependencies)
	}

	var parent localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/thumbs/run", `{"force":false,"wait":true}`, &parent)
	if parent.State != ledger.StatePartial || parent.Role != ledger.RoleParent {
		t.Fatalf("parent %s role %q, want partial parent", parent.State, parent.Role)
	}

	var g localapi.RunChildren
	e.must(t, http.StatusOK, "GET", "/api/runs/"+parent.RunID+"/children", "", &g)
	if g.Parent.RunID != parent.RunID {
		t.Fatalf("parent %q, want %q", g.Parent.RunID, parent.RunID)
	}
	type node struct {
		item, role string
		state      ledger.State
	}
	var got []node
	for _, c := range g.Children {
		if c.ParentRunID != parent.RunID {
			t.Errorf("child %s has parent %q", c.RunID, c.ParentRunID)
		}
		got = append(got, node{c.Item, c.Role, c.State})
	}
	want := []node{{"alpha", ledger.RoleChild, ledger.StateSucceeded}, {"bravo", ledger.RoleChild, ledger.StateFailed},
		{"charlie", ledger.RoleChild, ledger.StateSucceeded}, {"", ledger.RoleReducer, ledger.StateSucceeded}}
	if !slices.Equal(got, want) {
		t.Fatalf("children %+v, want %+v", got, want)
	}

	var filtered localapi.RunList
	e.must(t, http.StatusOK, "GET", "/api/runs?parent_run_id="+parent.RunID, "", &filtered)
	if len(filtered.Runs) != 4 {
		t.Fatalf("parent_run_id filter gave %d runs, want 4", len(filtered.Runs))
	}
	for _, r := range filtered.Runs {
		if r.ParentRunID != parent.RunID {
			t.Errorf("filter let through %s (parent %q)", r.RunID, r.ParentRunID)
		}
	}
	// A plain run has no children.
	var plainRun localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/extract/run", `{"force":false,"wait":true}`, &plainRun)
	var none localapi.RunChildren
	e.must(t, http.StatusOK, "GET", "/api/runs/"+plainRun.RunID+"/children", "", &none)
	if len(none.Children) != 0 || none.Parent.RunID != plainRun.RunID {
		t.Fatalf("a plain run's graph %+v", none)
	}

	e.must(t, http.StatusOK, "GET", "/api/jobs/load", "", &wf)
	deps := map[string]ledger.State{}
	for _, d := range wf.Dependencies {
		deps[d.JobID] = d.State
	}
	if deps["extract"] != ledger.StateSucceeded || deps["thumbs"] != ledger.StatePartial {
		t.Fatalf("dependencies after runs %+v", wf.Dependencies)
	}

	for _, c := range []struct {
		path string
		code int
	}{
		{"/api/runs/r-nope/children", http.StatusNotFound},
		{"/api/runs?parent_run_id=a%5Cb", http.StatusBadRequest},
	} {
		code, b, _ := e.call(t, "GET", c.path, token, "")
		if code != c.code {
			t.Errorf("GET %s: %d %s, want %d", c.path, code, b, c.code)
		}
	}
}

// startChain starts chain id of class with a first step due in an hour.
func startChain(t *testing.T, rt *agent.Runtime, id, class string) {
	t.Helper()
	_, err := rt.StartChain(context.Background(), agent.ChainStart{ID: id, Class: class, Stage: "action",
		Step: agent.StepSpec{Schedule: "in 1h", Payload: sh("true")}})
	if err != nil {
		t.Fatal(err)
	}
}

// Chains and breakers are served, chain lines reach the event stream, and
// a breaker reset needs the token.
func TestChainsThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.subscribe(t, "")
	startChain(t, e.rt, "probe-1", "probe")
	ev := s.next(t, localapi.EventChain)
	var line ledger.Entry
	if err := json.Unmarshal([]byte(ev.data), &line); err != nil {
		t.Fatal(err)
	}
	if line.Kind != ledger.KindChain || line.State != ledger.ChainStarted || line.Chain == nil || line.Chain.ID != "probe-1" {
		t.Fatalf("chain event %s", ev.data)
	}

	// Three failed chains of class disk open its breaker.
	ctx := context.Background()
	for _, id := range []string{"disk-1", "disk-2", "disk-3"} {
		startChain(t, e.rt, id, "disk")
		if _, err := e.rt.CloseChain(ctx, agent.ChainClose{ChainID: id, Reason: "did not help", Failed: true}); err != nil {
			t.Fatal(err)
		}
	}

	var list localapi.ChainList
	e.must(t, http.StatusOK, "GET", "/api/chains", "", &list)
	var ids []string
	for _, c := range list.Chains {
		ids = append(ids, c.ID)
	}
	if !slices.Equal(ids, []string{"probe-1", "disk-3", "disk-2", "disk-1"}) {
		t.Fatalf("chains %v, want the open one first, then closed newest first", ids)
	}
	e.must(t, http.StatusOK, "GET", "/api/chains?class=disk&state=closed", "", &list)
	if len(list.Chains) != 3 || list.Chains[0].ClosedReason == "" {
		t.Fatalf("closed disk chains %+v", list.Chains)
	}
	e.must(t, http.StatusOK, "GET", "/api/chains?state=active", "", &list)
	if len(list.Chains) != 0 {
		t.Fatalf("active chains %+v, want none", list.Chains)
	}

	var story localapi.ChainStory
	e.must(t, http.StatusOK, "GET", "/api/chains/probe-1", "", &story)
	if story.State != chain.StateArmed || len(story.Transitions) == 0 || len(story.Steps) != 1 ||
		story.Steps[0].Stage != "action" || story.Steps[0].Status != chain.StepPending || story.Steps[0].Run != nil {
		t.Fatalf("story %+v", story)
	}

	// Once the step has run, the story carries its run.
	var stepRun localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/"+story.Steps[0].JobID+"/run", `{"force":false,"wait":true}`, &stepRun)
	e.must(t, http.StatusOK, "GET", "/api/chains/probe-1", "", &story)
	if got := story.Steps[0]; got.Status != chain.StepSucceeded || got.Run == nil || got.Run.RunID != stepRun.RunID ||
		got.Run.State != ledger.StateSucceeded {
		t.Fatalf("step after its run %+v (run %+v), want run %s succeeded", got.Step, got.Run, stepRun.RunID)
	}

	var bl localapi.BreakerList
	e.must(t, http.StatusOK, "GET", "/api/chain-breakers", "", &bl)
	open := func() *chain.Breaker {
		for i := range bl.Breakers {
			if bl.Breakers[i].Class == "disk" {
				return &bl.Breakers[i]
			}
		}
		return nil
	}
	if b := open(); b == nil || b.State != chain.BreakerOpen || b.ResumeAt == nil {
		t.Fatalf("breakers %+v, want disk open with a resume time", bl.Breakers)
	}

	// Without the token nothing changes.
	code, b, _ := e.call(t, "POST", "/api/chain-breakers/disk/reset", "", "")
	if code != http.StatusUnauthorized || errorCode(t, b) != "unauthenticated" {
		t.Fatalf("reset without the token: %d %s", code, b)
	}
	e.must(t, http.StatusOK, "GET", "/api/chain-breakers", "", &bl)
	if b := open(); b == nil || b.State != chain.BreakerOpen {
		t.Fatalf("after a refused reset: %+v", bl.Breakers)
	}

	var reset chain.Breaker
	e.must(t, http.StatusOK, "POST", "/api/chain-breakers/disk/reset", "", &reset)
	if reset.State != chain.BreakerClosed {
		t.Fatalf("reset answered %+v", reset)
	}
	ev = s.next(t, localapi.EventChain)
	for line.State != ledger.ChainBreakerReset {
		if err := json.Unmarshal([]byte(ev.data), &line); err != nil {
			t.Fatal(err)
		}
		if line.State != ledger.ChainBreakerReset {
			ev = s.next(t, localapi.EventChain)
		}
	}
	e.must(t, http.StatusOK, "GET", "/api/chain-breakers", "", &bl)
	if b := open(); b == nil || b.State != chain.BreakerClosed {
		t.Fatalf("after reset: %+v", bl.Breakers)
	}

	if code, b, _ := e.bad(t, "GET", "/api/chains?state=bogus", token, ""); code != http.StatusBadRequest {
		t.Errorf("state=bogus: %d %s", code, b)
	}
	for _, c := range []struct {
		method, path, auth string
		code               int
	}{
		{"GET", "/api/chains/nope", token, http.StatusNotFound},
		{"POST", "/api/chain-breakers/nope/reset", token, http.StatusNotFound},
	} {
		code, b, _ := e.call(t, c.method, c.path, c.auth, "")
		if code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, code, b, c.code)
		}
	}
}
