package localapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/localapi"
)

// TestRunOfAStepOfAClosedChainThroughTheAPI: a step of an open chain runs
// by hand; once its chain is closed, another run of it is refused 409
// chain_closed (recorded skipped) and the client's error wraps
// chain.ErrClosed.
func TestRunOfAStepOfAClosedChainThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := t.Context()
	st, err := e.rt.StartChain(ctx, agent.ChainStart{ID: "held", Class: "disk", Stage: "action",
		Step: agent.StepSpec{Schedule: "in 1h", Payload: sh("sleep 30")}})
	if err != nil {
		t.Fatal(err)
	}
	path := "/api/jobs/" + st.Job.ID + "/run"
	var started localapi.RunStarted
	e.must(t, http.StatusAccepted, "POST", path, `{"force":false,"wait":false}`, &started)
	if started.RunID == "" || started.Skipped {
		t.Fatalf("run of a step of an open chain %+v", started)
	}
	if _, err := e.rt.CloseChain(ctx, agent.ChainClose{ChainID: "held", Reason: "fixed by hand"}); err != nil {
		t.Fatal(err)
	}
	code, b, _ := e.call(t, "POST", path, token, `{"force":false,"wait":true}`)
	if code != http.StatusConflict || errorCode(t, b) != localapi.CodeChainClosed || !strings.Contains(string(b), "fixed by hand") {
		t.Fatalf("run of a step of a closed chain: %d %s", code, b)
	}
	c := localapi.NewClient(e.base, token, nil)
	_, err = c.RunAndWait(ctx, st.Job.ID, agent.RunOptions{})
	if !errors.Is(err, chain.ErrClosed) || errors.Is(err, chain.ErrExpired) || chain.ExitCode(err) != chain.ExitClosed {
		t.Fatalf("client run of a step of a closed chain: %v", err)
	}
	e.must(t, http.StatusAccepted, "POST", "/api/runs/"+started.RunID+"/cancel", `{"reason":"test over"}`, nil)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if r, err := e.rt.Wait(wctx, started.RunID, time.Now().Add(-time.Hour)); err != nil || r.State != ledger.StateCancelled {
		t.Fatalf("the running step %+v %v", r, err)
	}
	runs, err := e.rt.Ledger().Runs(ctx, ledger.Filter{JobID: st.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	skipped := 0
	for _, r := range runs {
		if r.State == ledger.StateSkipped && r.Reason == "chain closed: fixed by hand" {
			skipped++
		}
	}
	if skipped != 2 {
		t.Fatalf("want the two refusals recorded skipped: %+v", runs)
	}
}

// TestRunOfAStepOfAnExpiredChainThroughTheAPI: past its chain's expiry
// (no sweeper has closed it yet) a step's run is refused 409 chain_expired,
// the chain closes expired and the step's job is gone; through the client
// the error wraps chain.ErrExpired.
func TestRunOfAStepOfAnExpiredChainThroughTheAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := t.Context()
	var steps []agent.ChainStep
	for _, id := range []string{"brief", "brief2"} {
		st, err := e.rt.StartChain(ctx, agent.ChainStart{ID: id, Class: "short", Stage: "action",
			Step: agent.StepSpec{Schedule: "in 1s", Payload: sh("true")}, Limits: agent.ChainLimits{Lifetime: 2 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, st)
	}
	// The chains expire at a wall-clock time; nothing signals it.
	time.Sleep(time.Until(steps[1].Chain.ExpiresAt) + 10*time.Millisecond)
	path := "/api/jobs/" + steps[0].Job.ID + "/run"
	code, b, _ := e.call(t, "POST", path, token, `{"force":false,"wait":true}`)
	if code != http.StatusConflict || errorCode(t, b) != localapi.CodeChainExpired {
		t.Fatalf("run of a step of an expired chain: %d %s", code, b)
	}
	var story localapi.ChainStory
	e.must(t, http.StatusOK, "GET", "/api/chains/brief", "", &story)
	if story.State != chain.StateClosed || story.ClosedReason != chain.ReasonExpired || story.Steps[0].Status != chain.StepSkipped ||
		story.Steps[0].Reason != "chain expired" {
		t.Fatalf("story %+v", story)
	}
	if code, b, _ := e.call(t, "POST", path, token, `{"force":false,"wait":true}`); code != http.StatusNotFound {
		t.Fatalf("run of the removed step: %d %s", code, b)
	}
	c := localapi.NewClient(e.base, token, nil)
	_, err := c.RunAndWait(ctx, steps[1].Job.ID, agent.RunOptions{})
	if !errors.Is(err, chain.ErrExpired) || chain.ExitCode(err) != chain.ExitClosed {
		t.Fatalf("client run of a step of an expired chain: %v", err)
	}
}
