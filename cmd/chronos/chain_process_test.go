package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

// chainE2E is a real `chronos nas` and a serving agent (`chronos agent
// serve`, chronos provider) with a chains section in its config.
type chainE2E struct {
	*e2e
	agentURL string
}

// setupChains starts NAS and an agent whose config ends with chains (YAML
// of the chains section, indented by two spaces).
func setupChains(t *testing.T, chains string) *chainE2E {
	t.Helper()
	e := setupE2E(t)
	addr := freeAddr(t)
	cfg := strings.Replace(agentYAML(e.home, e.nasURL, "http://"+addr, "agent:inst-e2e"), "listen: 127.0.0.1:1", "listen: "+addr, 1)
	writeFile(t, e.cfg, cfg+"chains:\n"+chains)
	startProc(t, e.bin, e.env, nil, "agent", "serve", "--config", e.cfg)
	waitHTTP(t, "http://"+addr+"/readyz", 30*time.Second)
	return &chainE2E{e2e: e, agentURL: "http://" + addr}
}

// script writes an executable shell script that can call the binary as
// $CHRONOS and returns its path.
func (c *chainE2E) script(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nCHRONOS="+c.bin+"\nD="+c.dir+"\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// try runs the binary and returns its output and exit code.
func (c *chainE2E) try(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// await polls cond every 100 ms until it holds or d passes.
func await(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// closed waits for chain id to close and returns it.
func (c *chainE2E) closed(t *testing.T, id string, d time.Duration) chain.Chain {
	t.Helper()
	var ch chain.Chain
	await(t, d, "chain "+id+" to close", func() bool {
		out, code := c.try(t, "chains", "show", id, "--json")
		if code == 2 && strings.Contains(out, "chain not found") {
			return false // not started yet
		}
		if err := json.Unmarshal([]byte(out), &ch); err != nil {
			t.Fatalf("chains show %s: exit %d: %s", id, code, out)
		}
		return ch.State == chain.StateClosed
	})
	return ch
}

// noChainJobs checks that no chain step is left in jobs.json or armed at
// NAS, waiting for the agent's reconcile to cancel what was removed.
func (c *chainE2E) noChainJobs(t *testing.T, chainID string) {
	t.Helper()
	// The last step's job leaves jobs.json when its run is settled, a
	// moment after its script has ended.
	var left []string
	await(t, 10*time.Second, "no chain step left in jobs.json", func() bool {
		st, err := store.Open(c.home, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		jobs, err := st.List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, j := range jobs {
			if j.Chain != nil {
				left = append(left, j.ID)
			}
		}
		return len(left) == 0
	})
	await(t, 10*time.Second, "NAS to hold no step of "+chainID, func() bool {
		for id := range c.armed(t) {
			if strings.HasPrefix(id, chainID+".") {
				return false
			}
		}
		return true
	})
}

// metrics returns the agent's /metrics page.
func (c *chainE2E) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(c.agentURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// ledgerRuns returns the runs of job in the home's ledger.
func (c *chainE2E) ledgerRuns(t *testing.T, job string) []ledger.Run {
	t.Helper()
	l, err := ledger.Open(filepath.Join(c.home, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := l.Runs(context.Background(), ledger.Filter{JobID: job})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func stepStatuses(ch chain.Chain) []string {
	var out []string
	for _, s := range ch.Steps {
		out = append(out, s.JobID+"="+string(s.Status))
	}
	return out
}

// TestChainScriptedIncident: a scout (every 2s) sees a flag file and starts
// a chain; the action spawns a verify step; verify fails twice, retrying
// with a growing delay, then succeeds, removes the flag and the chain
// closes itself; the scout starts nothing more; no step is left in
// jobs.json or at NAS, and `chains show` tells the story.
func TestChainScriptedIncident(t *testing.T) {
	t.Parallel()
	c := setupChains(t, "  classes:\n    disk:\n      max_depth: 3\n")
	flag := filepath.Join(c.dir, "flag")
	writeFile(t, flag, "disk full\n")
	verify := c.script(t, "verify.sh", `echo "verify attempt $CHRONOS_CHAIN_ATTEMPT" >> $D/verify.log
if [ "$CHRONOS_CHAIN_ATTEMPT" -lt 3 ]; then
  $CHRONOS chain spawn --retry --in "${CHRONOS_CHAIN_ATTEMPT}s" -- $D/verify.sh || exit 9
  exit 1
fi
rm -f $D/flag`)
	action := c.script(t, "action.sh", `echo "action $CHRONOS_CHAIN_ID $CHRONOS_CHAIN_STAGE $CHRONOS_CHAIN_DEPTH" >> $D/action.log
$CHRONOS chain spawn --stage verify --in 1s -- `+verify)
	scout := c.script(t, "scout.sh", `[ -f $D/flag ] || exit 0
$CHRONOS chain start --class disk --id disk-incident-1 --stage action --in 1s -- `+action+`
echo $? >> $D/scout-codes`)
	c.cli(t, "jobs", "add", "--id", "scout", "--schedule", "every 2s", "--", scout)

	ch := c.closed(t, "disk-incident-1", 40*time.Second)
	want := []string{"disk-incident-1.action.1.1=succeeded", "disk-incident-1.verify.2.1=failed",
		"disk-incident-1.verify.2.2=failed", "disk-incident-1.verify.2.3=succeeded"}
	if !slices.Equal(stepStatuses(ch), want) || ch.ClosedReason != chain.ReasonDone || ch.Outcome != chain.OutcomeSuccess {
		t.Fatalf("story: %v, closed %q (%s)", stepStatuses(ch), ch.ClosedReason, ch.Outcome)
	}
	var path []chain.State
	for _, tr := range ch.Transitions {
		path = append(path, tr.To)
	}
	if !slices.Equal(path, []chain.State{chain.StateArmed, chain.StateActive, chain.StateClosed}) {
		t.Fatalf("transitions %+v", ch.Transitions)
	}
	for _, s := range ch.Steps {
		if s.RunID == "" || s.Output == "" || s.EndedAt == nil {
			t.Fatalf("step without its run: %+v", s)
		}
	}
	if r := ch.Steps[2]; r.SpawnedBy != ch.Steps[1].JobID || !r.FireAt.After(*ch.Steps[1].StartedAt) {
		t.Fatalf("retry %+v", r)
	}
	c.noChainJobs(t, "disk-incident-1")
	// The flag is gone: two more scout runs start nothing.
	before := len(c.ledgerRuns(t, "scout"))
	await(t, 15*time.Second, "two more scout runs", func() bool { return len(c.ledgerRuns(t, "scout")) >= before+2 })
	if out := c.cli(t, "chains", "list", "--json"); strings.Count(out, `"class": "disk"`) != 1 {
		t.Fatalf("chains after the incident: %s", out)
	}
	story := c.cli(t, "chains", "show", "disk-incident-1")
	for _, s := range []string{"closed", "verify depth 2 attempt 3", "done (success)"} {
		if !strings.Contains(story, s) {
			t.Errorf("chains show lacks %q:\n%s", s, story)
		}
	}
}

// TestChainScoutFiringTwiceStartsOneChain: while the first step waits, the
// scout fires again for the same incident; its start is refused as a
// duplicate (exit 3) and one chain runs.
func TestChainScoutFiringTwiceStartsOneChain(t *testing.T) {
	t.Parallel()
	c := setupChains(t, "  classes:\n    disk: {}\n")
	action := c.script(t, "action.sh", `$CHRONOS chain close --reason fixed`)
	scout := c.script(t, "scout.sh", `$CHRONOS chain start --class disk --id disk-incident-2 --stage action --in 6s -- `+action+`
echo $? >> $D/scout-codes`)
	c.cli(t, "jobs", "add", "--id", "scout", "--schedule", "every 2s", "--", scout)
	codes := filepath.Join(c.dir, "scout-codes")
	await(t, 20*time.Second, "the scout to fire twice", func() bool {
		b, _ := os.ReadFile(codes)
		return len(strings.Fields(string(b))) >= 2
	})
	b, _ := os.ReadFile(codes)
	if f := strings.Fields(string(b)); f[0] != "0" || f[1] != "3" {
		t.Fatalf("scout exit codes %v, want 0 then 3 (duplicate)", f)
	}
	ch := c.closed(t, "disk-incident-2", 20*time.Second)
	if len(ch.Steps) != 1 || ch.ClosedReason != "fixed" {
		t.Fatalf("chain %+v", ch)
	}
	out := c.cli(t, "chains", "list", "--class", "disk", "--json")
	var all []chain.Chain
	if err := json.Unmarshal([]byte(out), &all); err != nil || len(all) != 1 {
		t.Fatalf("chains %s (%v)", out, err)
	}
}

// TestChainSpawnLoopStoppedAtMaxChildren: a step that spawns the next step
// every time is refused at max_children (exit 4); the chain is closed
// "limit: max_children" and leaves no job behind.
func TestChainSpawnLoopStoppedAtMaxChildren(t *testing.T) {
	t.Parallel()
	c := setupChains(t, "  classes:\n    loop:\n      max_depth: 10\n      max_children: 3\n")
	loop := c.script(t, "loop.sh", `$CHRONOS chain spawn --stage "s$((CHRONOS_CHAIN_DEPTH + 1))" --in 1s -- $D/loop.sh
echo $? >> $D/codes`)
	if out, code := c.try(t, "chain", "start", "--class", "loop", "--id", "runaway", "--stage", "s1", "--in", "1s", "--", loop); code != 0 {
		t.Fatalf("start: %d %s", code, out)
	}
	ch := c.closed(t, "runaway", 30*time.Second)
	if ch.ClosedReason != "limit: max_children" || ch.Outcome != chain.OutcomeFailure || ch.Children != 3 {
		t.Fatalf("chain closed %q, %d steps", ch.ClosedReason, ch.Children)
	}
	await(t, 10*time.Second, "the last step's exit code", func() bool {
		b, _ := os.ReadFile(filepath.Join(c.dir, "codes"))
		return len(strings.Fields(string(b))) == 3
	})
	b, _ := os.ReadFile(filepath.Join(c.dir, "codes"))
	if f := strings.Fields(string(b)); !slices.Equal(f, []string{"0", "0", "4"}) {
		t.Fatalf("spawn exit codes %v", f)
	}
	c.noChainJobs(t, "runaway")
	if _, code := c.try(t, "chain", "spawn", "--chain", "runaway", "--stage", "late", "--in", "1s", "--", "true"); code != 6 {
		t.Fatalf("spawn into the closed chain: exit %d, want 6", code)
	}
}

// TestChainBreakerOpensAfterThreeFailures: three failed chains of one class
// open its breaker; the fourth start is refused (exit 5); the alert is
// delivered once with the last three run ids; after the (short) cooldown a
// start works.
func TestChainBreakerOpensAfterThreeFailures(t *testing.T) {
	t.Parallel()
	alerts := filepath.Join(t.TempDir(), "alerts.jsonl")
	c := setupChains(t, fmt.Sprintf("  notify: [\"file:%s\"]\n  classes:\n    flaky:\n      breaker_cooldown: 4s\n", alerts))
	var runs []string
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("flaky-%d", i)
		c.cli(t, "chain", "start", "--class", "flaky", "--id", id, "--stage", "action", "--in", "1s", "--", "sh", "-c", "exit 1")
		ch := c.closed(t, id, 20*time.Second)
		if ch.Outcome != chain.OutcomeFailure || ch.ClosedReason != "step failed: action" {
			t.Fatalf("chain %s closed %q", id, ch.ClosedReason)
		}
		runs = append(runs, ch.Steps[0].RunID)
	}
	out, code := c.try(t, "chain", "start", "--class", "flaky", "--id", "flaky-4", "--stage", "action", "--in", "1s", "--", "true")
	if code != 5 || !strings.Contains(out, "breaker open") {
		t.Fatalf("fourth start: exit %d: %s", code, out)
	}
	if st := c.status(t); len(st.Breakers) != 1 || st.Breakers[0].Class != "flaky" || len(st.Chains) != 0 {
		t.Fatalf("agent status: breakers %+v, chains %+v", st.Breakers, st.Chains)
	}
	page := c.metrics(t)
	for _, m := range []string{`chronos_agent_chain_breaker_openings_total{class="flaky"} 1`,
		`chronos_agent_chain_spawns_refused_total{reason="breaker_open"} 1`, `chronos_agent_chains{state="closed"} 3`} {
		if !strings.Contains(page, m) {
			t.Errorf("metrics lack %s", m)
		}
	}
	var body notify.Body
	await(t, 15*time.Second, "the breaker alert", func() bool {
		b, _ := os.ReadFile(alerts)
		return len(b) > 0 && json.Unmarshal(b, &body) == nil
	})
	if body.Event != notify.EventChainBreakerOpen || body.Breaker == nil || !slices.Equal(body.Breaker.RunIDs, runs) || body.Breaker.Class != "flaky" {
		t.Fatalf("alert %+v", body)
	}
	var bs []chain.Breaker
	await(t, 20*time.Second, "the breaker to close after its cooldown", func() bool {
		if err := json.Unmarshal([]byte(c.cli(t, "chain", "breaker", "list", "--json")), &bs); err != nil {
			t.Fatal(err)
		}
		return len(bs) == 1 && bs[0].State == chain.BreakerClosed
	})
	if bs[0].Openings != 1 || !body.Breaker.ResumeAt.Equal(*bs[0].ResumeAt) {
		t.Fatalf("breaker %+v", bs[0])
	}
	if out, code := c.try(t, "chain", "start", "--class", "flaky", "--id", "flaky-5", "--stage", "action", "--in", "1s", "--", "true"); code != 0 {
		t.Fatalf("start after the cooldown: exit %d: %s", code, out)
	}
	c.closed(t, "flaky-5", 20*time.Second)
	if b, _ := os.ReadFile(alerts); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("alerts delivered: %s", b)
	}
}

// TestChainExpiryCancelsThePendingStep: a chain whose pending step is due
// after its expiry is closed "expired" at the expiry; the step is
// cancelled at NAS and never runs.
func TestChainExpiryCancelsThePendingStep(t *testing.T) {
	t.Parallel()
	c := setupChains(t, "  classes:\n    short: {}\n")
	late := c.script(t, "late.sh", `touch $D/late-ran`)
	first := c.script(t, "first.sh", `$CHRONOS chain spawn --stage monitor --in 8s -- `+late)
	c.cli(t, "chain", "start", "--class", "short", "--id", "brief", "--stage", "action", "--in", "1s", "--lifetime", "4s", "--", first)
	const step = "brief.monitor.2.1"
	await(t, 15*time.Second, "the monitor step armed at NAS", func() bool { _, ok := c.armed(t)[step]; return ok })
	ch := c.closed(t, "brief", 15*time.Second)
	if ch.ClosedReason != chain.ReasonExpired || ch.Steps[1].Status != chain.StepCancelled {
		t.Fatalf("chain %q: %v", ch.ClosedReason, stepStatuses(ch))
	}
	c.noChainJobs(t, "brief")
	// Watch past the step's fire time: it never runs.
	until := ch.Steps[1].FireAt.Add(3 * time.Second)
	for time.Now().Before(until) {
		if _, err := os.Stat(filepath.Join(c.dir, "late-ran")); err == nil {
			t.Fatal("the cancelled step ran")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if rs := c.ledgerRuns(t, step); len(rs) != 0 {
		t.Fatalf("runs of the cancelled step: %+v", rs)
	}
}
