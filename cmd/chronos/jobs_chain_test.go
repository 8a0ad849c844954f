package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/ledger"
)

// TestJobsRunOfAChainStepObeysItsChain runs the commands in process on a
// home no agent serves: `jobs run` of a step whose chain has expired (no
// sweeper closed it) exits 6 with the reason and runs nothing, the chain
// closes expired with the step skipped; a step of an open chain runs.
func TestJobsRunOfAChainStepObeysItsChain(t *testing.T) {
	home, cmd := homeCLI(t)
	ran := filepath.Join(home, "ran")
	code, out, errs := cmd("chain", "start", "--class", "short", "--id", "brief", "--stage", "action", "--in", "1s", "--lifetime", "2s", "--json", "--", "touch", ran)
	var started agent.ChainStep
	if code != 0 || json.Unmarshal([]byte(out), &started) != nil {
		t.Fatalf("chain start: exit %d: %s%s", code, out, errs)
	}
	// The chain expires at a wall-clock time; nothing signals it.
	time.Sleep(time.Until(started.Chain.ExpiresAt) + 10*time.Millisecond)
	code, out, errs = cmd("jobs", "run", started.Job.ID, "--json")
	if code != chain.ExitClosed || out != "" || !strings.Contains(errs, "expired at") || !strings.Contains(errs, "recorded skipped as run") {
		t.Fatalf("jobs run of a step of an expired chain: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the step of the expired chain ran")
	}
	code, out, _ = cmd("chains", "show", "brief", "--json")
	var c chain.Chain
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || c.ClosedReason != chain.ReasonExpired || c.Steps[0].Status != chain.StepSkipped {
		t.Fatalf("chains show: exit %d: %s", code, out)
	}
	if code, _, errs := cmd("jobs", "run", started.Job.ID); code != 2 || !strings.Contains(errs, "no job") {
		t.Fatalf("jobs run of the removed step: exit %d: %s", code, errs)
	}

	if code, out, errs := cmd("chain", "start", "--class", "disk", "--id", "live", "--stage", "action", "--in", "10m", "--", "touch", ran); code != 0 {
		t.Fatalf("chain start: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = cmd("jobs", "run", "live.action.1.1", "--json")
	var r ledger.Run
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.State != ledger.StateSucceeded {
		t.Fatalf("jobs run of a step of an open chain: exit %d: %s%s", code, out, errs)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("the step of the open chain did not run")
	}
	code, out, _ = cmd("chains", "show", "live", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || c.ClosedReason != chain.ReasonDone || c.Steps[0].RunID != r.RunID || c.Steps[0].StartedAt == nil {
		t.Fatalf("chains show: exit %d: %s", code, out)
	}
}

// TestChainStepRunByHandAfterItsChainClosed: through a serving agent, a
// step fired through NAS runs; its chain is closed by hand meanwhile;
// `jobs run` of the step then exits 6 (the agent's 409 chain_closed)
// and runs nothing, and the running step still ends on its own.
func TestChainStepRunByHandAfterItsChainClosed(t *testing.T) {
	t.Parallel()
	c := setupChains(t, "  classes:\n    stuck: {}\n")
	step := c.script(t, "step.sh", `echo x >> $D/runs; while [ ! -e $D/go ]; do sleep 0.1; done`)
	c.cli(t, "chain", "start", "--class", "stuck", "--id", "stuck", "--stage", "action", "--in", "1s", "--", step)
	const job = "stuck.action.1.1"
	runs := filepath.Join(c.dir, "runs")
	await(t, 15*time.Second, "the step to run", func() bool { _, err := os.Stat(runs); return err == nil })
	c.cli(t, "chain", "close", "--chain", "stuck", "--reason", "fixed by hand")
	out, code := c.try(t, "jobs", "run", job)
	if code != chain.ExitClosed || !strings.Contains(out, "chain closed") || !strings.Contains(out, "fixed by hand") {
		t.Fatalf("jobs run of a step of a closed chain: exit %d: %s", code, out)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "go"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	await(t, 15*time.Second, "the step's run to end", func() bool {
		for _, r := range c.ledgerRuns(t, job) {
			if r.State == ledger.StateSucceeded {
				return true
			}
		}
		return false
	})
	if b, err := os.ReadFile(runs); err != nil || string(b) != "x\n" {
		t.Fatalf("the step ran %q (%v), want once", b, err)
	}
	ch := c.closed(t, "stuck", time.Second)
	if ch.ClosedReason != "fixed by hand" || ch.Steps[0].Status != chain.StepSucceeded {
		t.Fatalf("chain %q: %v", ch.ClosedReason, stepStatuses(ch))
	}
	c.noChainJobs(t, "stuck")
}
