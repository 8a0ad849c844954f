package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/schedule"
)

// ---- jobs as the agent stored them ----

// jobRecord is what the tests read of a job from the home's jobs.json.
type jobRecord struct {
	ID        string     `json:"id"`
	Schedule  string     `json:"schedule"`
	Timezone  string     `json:"timezone"`
	Enabled   bool       `json:"enabled"`
	CreatedAt time.Time  `json:"created_at"`
	NextRunAt *time.Time `json:"next_run_at"`
}

// readJobs reads jobs.json (written by rename, so always whole).
func readJobs(t *testing.T, home string) map[string]jobRecord {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(home, "jobs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Jobs []jobRecord `json:"jobs"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatalf("jobs.json: %v", err)
	}
	out := map[string]jobRecord{}
	for _, j := range st.Jobs {
		out[j.ID] = j
	}
	return out
}

// slotsBetween lists the slots of j after from, up to and including to,
// computed with the schedule package from the job as stored.
func slotsBetween(t *testing.T, j jobRecord, from, to time.Time) []time.Time {
	t.Helper()
	loc := time.UTC
	if j.Timezone != "" {
		l, err := time.LoadLocation(j.Timezone)
		if err != nil {
			t.Fatal(err)
		}
		loc = l
	}
	s, err := schedule.Parse(j.Schedule, schedule.Options{Location: loc, Anchor: j.CreatedAt})
	if err != nil {
		t.Fatalf("job %s: %v", j.ID, err)
	}
	var out []time.Time
	at := from
	for {
		n, ok := s.Next(at)
		if !ok || n.After(to) {
			return out
		}
		out = append(out, n.UTC())
		at = n
	}
}

// realRuns are the runs of a slot other than duplicate answers.
func realRuns(rs []*run) []*run {
	var out []*run
	for _, r := range rs {
		if r.state != "duplicate" {
			out = append(out, r)
		}
	}
	return out
}

// assertOncePerSlot checks that every slot of want ran exactly once and
// succeeded, and that no slot of job outside want (up to horizon) ran.
func assertOncePerSlot(t *testing.T, runs map[string]*run, job string, want []time.Time, horizon time.Time) {
	t.Helper()
	slots := bySlot(runs, job)
	wanted := map[time.Time]bool{}
	for _, s := range want {
		wanted[s] = true
		rs := realRuns(slots[s])
		if len(rs) != 1 || rs[0].state != "succeeded" {
			t.Errorf("job %s slot %s: want exactly one succeeded run, got %d: %s", job, s.Format(time.RFC3339), len(rs), describeRuns(slots[s]))
		}
	}
	for s, rs := range slots {
		if wanted[s] || s.After(horizon) {
			continue
		}
		if real := realRuns(rs); len(real) > 0 {
			t.Errorf("job %s ran for slot %s, which is not one of its slots: %s", job, s.Format(time.RFC3339), describeRuns(rs))
		}
	}
	if len(want) == 0 {
		t.Errorf("job %s had no slot in the window", job)
	}
}

// TestEveryFireOfAWindowRunsExactlyOnce: NAS on Redis with no dispatchers of
// its own, two relay processes, two agent replicas sharing one home, and a
// job of every schedule kind; one relay and one replica are killed with
// SIGKILL during the window. Every slot of the window runs exactly once (one
// succeeded run per job and slot in the ledger, none missing between the
// first and the last), and both replicas took fires.
func TestEveryFireOfAWindowRunsExactlyOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Redis: true, Relays: 2, Agents: 2})
	jobs := map[string]string{
		"interval": "every 2s",
		"seconds":  "*/3 * * * * *",
		"oneshot":  "in 7s",
		"phrase":   "every minute",
		"zoned":    "CRON_TZ=Asia/Kolkata */5 * * * * *",
	}
	names := make([]string, 0, len(jobs))
	for name := range jobs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s.addJob(name, jobs[name])
	}
	start := time.Now()
	window := 25 * time.Second
	if soak() {
		window = 2 * time.Minute
	}
	// The natural phrase fires on the minute: the window includes one.
	end := start.Add(window)
	if minute := start.Truncate(time.Minute).Add(time.Minute); end.Before(minute.Add(4 * time.Second)) {
		end = minute.Add(4 * time.Second)
	}
	// The window itself: the fires happen on their own. A third of the way
	// in, one relay process is killed (its leased fires come back after its
	// 3 s lease); two thirds in, one agent replica is killed (the callback
	// address sends fires to the other).
	time.Sleep(time.Until(start.Add(window / 3)))
	s.relays[0].kill()
	time.Sleep(time.Until(start.Add(2 * window / 3)))
	s.agents[1].kill()
	killedOwner := fmt.Sprintf(":%d:", s.agents[1].cmd.Process.Pid)
	time.Sleep(time.Until(end))
	// Slots up to end-2s must be done; give their runs a moment to finish.
	horizon := end.Add(-2 * time.Second)
	stored := readJobs(t, s.home)
	eventually(t, 15*time.Second, "every slot of the window to succeed", func() (bool, string) {
		runs := foldRuns(readLedger(t, s.home))
		for _, name := range names {
			j := stored[s.jobID(name)]
			for _, slot := range slotsBetween(t, j, j.CreatedAt, horizon) {
				rs := realRuns(bySlot(runs, j.ID)[slot])
				if len(rs) == 0 || rs[0].state == "claimed" || rs[0].state == "running" {
					return false, fmt.Sprintf("job %s slot %s: %s", name, slot.Format(time.RFC3339), describeRuns(rs))
				}
			}
		}
		return true, ""
	})
	runs := foldRuns(readLedger(t, s.home))
	// A run the killed replica had in progress ends interrupted (on_interrupt
	// record: at most once); it must not have run again elsewhere.
	for _, r := range runs {
		if r.state != "interrupted" {
			continue
		}
		owned := false
		for o := range r.owners {
			owned = owned || strings.Contains(o, killedOwner)
		}
		if !owned {
			t.Errorf("run %s of %s slot %s was interrupted, but not by the killed replica: %s", r.id, r.job, r.slot.Format(time.RFC3339), describeRuns([]*run{r}))
			continue
		}
		t.Logf("run %s of %s slot %s was in progress on the killed replica: interrupted", r.id, r.job, r.slot.Format(time.RFC3339))
		r.state = "succeeded" // it started once; the slot counts as run
	}
	owners := map[string]bool{}
	total := 0
	for _, name := range names {
		j := stored[s.jobID(name)]
		want := slotsBetween(t, j, j.CreatedAt, horizon)
		assertOncePerSlot(t, runs, j.ID, want, horizon)
		total += len(want)
		for _, r := range runs {
			if r.job == j.ID && r.state == "succeeded" {
				for o := range r.owners {
					owners[o] = true
				}
			}
		}
	}
	if len(owners) < 2 {
		t.Errorf("the runs had %d owners; both replicas should have taken fires: %v", len(owners), owners)
	}
	for _, f := range s.proxy.records() {
		switch {
		case f.status == 401 || f.status == 500:
			t.Errorf("a replica answered %d to a fire of %s: %s", f.status, f.job, f.answer)
		case f.status == 503:
			t.Logf("a replica deferred a fire of %s (503, NAS retries): %s", f.job, f.answer)
		}
	}
	// The operator's view, chronos runs list, says the same as the ledger.
	var listed []struct {
		RunID string `json:"run_id"`
		JobID string `json:"job_id"`
		State string `json:"state"`
	}
	out := s.mustCLI("runs", "list", "--home", s.home, "--limit", "0", "--json")
	if err := json.Unmarshal([]byte(out), &listed); err != nil {
		t.Fatalf("runs list --json: %v\n%s", err, out)
	}
	seen := map[string]string{}
	for _, r := range listed {
		seen[r.RunID] = r.State
	}
	for _, r := range foldRuns(readLedger(t, s.home)) {
		if st, ok := seen[r.id]; !ok && r.slot.Before(horizon) {
			t.Errorf("runs list does not show run %s of %s", r.id, r.job)
		} else if ok && st != r.state && r.state != "claimed" && r.state != "running" {
			t.Errorf("runs list says run %s is %s; the ledger says %s", r.id, st, r.state)
		}
	}
	t.Logf("%d slots over %s, each run exactly once, by %d replicas", total, end.Sub(start).Round(time.Second), len(owners))
}

// TestFiresDeliveredTwiceRunOnce: the same fire delivered twice on purpose
// runs once, in three ways.
//
//   - NAS delivers one slot twice with two valid tokens: two signed relay
//     calls with different delivery ids for the same armed one-shot, at once.
//     The agent runs it once and answers the other duplicate; an exact
//     replay of a signed call is answered duplicate by NAS itself.
//   - The same fire request (same token) reaches both replicas at once.
//   - A replica's answer is lost on the way: NAS sees a 503 and asks the
//     relay to retry, but the agent has already claimed the slot and re-armed
//     the next one, which supersedes the old fire.
//
// The ledger shows one run per slot, with the second deliveries that reached
// the agent recorded as duplicate.
func TestFiresDeliveredTwiceRunOnce(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Redis: true, Relays: 1, Agents: 2})
	// The one-shot is due within the clock-skew allowance (30 s), so the
	// relayed deliveries below, made before its slot, are not refused as
	// too early.
	later := s.addJob("later", "in 20s")
	twice := s.addJob("twice", "every 3s")
	lost := s.addJob("lost", "every 3s")
	s.proxy.duplicate(twice)
	s.proxy.loseAnswers(lost, 2)

	// Two deliveries of the one-shot, signed as the relay signs them.
	armed := s.armed(later)
	first := s.relayCall(armed, 1)
	var wg sync.WaitGroup
	var answers [2]string
	for i, id := range []string{"dlv-a", "dlv-b"} {
		wg.Go(func() { answers[i] = s.postRelay(id, s.relayCall(armed, i+1)) })
	}
	wg.Wait()
	for _, a := range answers {
		if !strings.Contains(a, `"status":"delivered"`) {
			t.Errorf("a relayed delivery was answered %s, want delivered", a)
		}
	}
	if a := s.postRelay("dlv-a", first); !strings.Contains(a, `"status":"duplicate"`) {
		t.Errorf("an exact replay of a signed relay call was answered %s, want duplicate", a)
	}

	eventually(t, 30*time.Second, "the one-shot, and two slots of each interval job, with their second deliveries", func() (bool, string) {
		runs := foldRuns(readLedger(t, s.home))
		if rs := bySlot(runs, later)[armed.FireAt.UTC()]; len(rs) < 2 || len(realRuns(rs)) != 1 || realRuns(rs)[0].state != "succeeded" {
			return false, "one-shot: " + describeRuns(rs)
		}
		done := 0
		for _, rs := range bySlot(runs, twice) {
			if len(rs) >= 2 && len(realRuns(rs)) == 1 && realRuns(rs)[0].state == "succeeded" {
				done++
			}
		}
		if done < 2 {
			return false, fmt.Sprintf("twice: %d slots with a run and a duplicate", done)
		}
		n := 0
		for _, f := range s.proxy.records() {
			if f.job == lost && f.status == 202 {
				n++
			}
		}
		return n >= 4, fmt.Sprintf("lost: %d fires accepted", n)
	})

	runs := foldRuns(readLedger(t, s.home))
	for _, job := range []string{later, twice, lost} {
		for slot, rs := range bySlot(runs, job) {
			if real := realRuns(rs); len(real) > 1 {
				t.Errorf("job %s slot %s ran %d times: %s", job, slot.Format(time.RFC3339), len(real), describeRuns(rs))
			}
			for _, r := range rs {
				if r.state == "duplicate" && !strings.Contains(r.reason, "already claimed") {
					t.Errorf("duplicate without its reason: %s", describeRuns([]*run{r}))
				}
			}
		}
	}
	// NAS saw the two lost answers as failures to retry. The agent had
	// already re-armed the job, which superseded the old one-shot, so a
	// redelivery either never happened or was answered duplicate: never a
	// second run.
	_, metrics := httpGet(s.internalURL + "/metrics")
	if retries := metricValue(metrics, `chronos_nas_deliveries_total{outcome="retry"}`); retries < 2 {
		t.Errorf("NAS counted %v deliveries to retry, want at least the 2 lost answers", retries)
	}
	for _, f := range s.proxy.records() {
		if f.job == lost && f.attempt > 1 && !strings.Contains(f.answer, `"duplicate"`) {
			t.Errorf("a redelivery of %s (attempt %d, slot %s) was answered %d %s", lost, f.attempt, f.fireAt.Format(time.RFC3339), f.status, f.answer)
		}
	}
}

// supersededBy returns the slot that run_once's missed reasons name as the
// one that ran ("superseded by the run for slot T"), when they all name the
// same one.
func supersededBy(reasons []string) time.Time {
	var at time.Time
	for _, r := range reasons {
		_, after, ok := strings.Cut(r, "superseded by the run for slot ")
		if !ok {
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339, strings.Fields(after)[0])
		if err != nil || (!at.IsZero() && !t.Equal(at)) {
			return time.Time{}
		}
		at = t.UTC()
	}
	return at
}

// metricValue returns the value of one sample of a Prometheus text page (0
// when absent).
func metricValue(page, sample string) float64 {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			_, _ = fmt.Sscan(rest, &v)
			return v
		}
	}
	return 0
}

// TestAgentStoppedPastItsRetriesCatchesUpByPolicy: the agent is killed
// across several slots of three jobs, one per misfire policy (grace 1 s), and
// comes back. Every overdue slot gets a ledger line that says what the policy
// did: skip records them missed, run_once runs one and records the rest
// missed, run_all runs each (up to its bound) as a catch_up run.
func TestAgentStoppedPastItsRetriesCatchesUpByPolicy(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{})
	s.addJob("skip", "every 2s", "--misfire", "skip", "--grace", "1s")
	s.addJob("runonce", "every 2s", "--misfire", "run_once", "--grace", "1s")
	s.addJob("runall", "every 2s", "--misfire", "run_all", "--grace", "1s")
	ids := map[string]string{"skip": s.jobID("skip"), "runonce": s.jobID("runonce"), "runall": s.jobID("runall")}

	eventually(t, 20*time.Second, "a first run of each job", func() (bool, string) {
		runs := foldRuns(readLedger(t, s.home))
		for name, id := range ids {
			ok := false
			for _, r := range runs {
				ok = ok || (r.job == id && r.state == "succeeded")
			}
			if !ok {
				return false, name + " has not run"
			}
		}
		return true, ""
	})
	agent := s.agents[0]
	// The outage: four or five slots of each job pass while the relay keeps
	// retrying the first. In the soak form it outlasts the relay's retries
	// (10 attempts, about a minute), so NAS dead-letters that fire and
	// reports it to the agent when it comes back.
	outage := 9 * time.Second
	if soak() {
		outage = 80 * time.Second
	}
	agent.kill()
	down := time.Now()
	time.Sleep(outage)
	agent.restart()
	waitReady(t, agent, s.agentURLs[0]+"/readyz", 30*time.Second)
	up := time.Now()

	stored := readJobs(t, s.home)
	// Every overdue slot gets a ledger line ("skips are recorded, never
	// silent"), whichever comes first after the restart: the relay's pending
	// retry of the oldest slot or the agent's own catch-up.
	unaccounted := func() []string {
		var out []string
		runs := foldRuns(readLedger(t, s.home))
		for _, name := range []string{"skip", "runonce", "runall"} {
			id := ids[name]
			for _, slot := range slotsBetween(t, stored[id], down, up.Add(-time.Second)) {
				if len(bySlot(runs, id)[slot]) == 0 {
					out = append(out, name+" "+slot.Format(time.RFC3339))
				}
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(unaccounted()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if missing := unaccounted(); len(missing) > 0 {
		t.Errorf("overdue slots with no ledger line after the agent came back (the misfire policy must record or run each): %s", strings.Join(missing, ", "))
	}
	runs := foldRuns(readLedger(t, s.home))
	for name, id := range ids {
		overdue := slotsBetween(t, stored[id], down, up.Add(-time.Second))
		if len(overdue) < 3 {
			t.Fatalf("%s: only %d slots fell in the outage", name, len(overdue))
		}
		var ran, missed []string
		for _, slot := range overdue {
			rs := bySlot(runs, id)[slot]
			for _, r := range realRuns(rs) {
				switch r.state {
				case "missed", "skipped":
					missed = append(missed, r.reason)
				default:
					ran = append(ran, r.trigger+":"+r.state)
				}
			}
			if len(realRuns(rs)) > 1 {
				t.Errorf("%s slot %s handled twice: %s", name, slot.Format(time.RFC3339), describeRuns(rs))
			}
		}
		switch name {
		case "skip":
			if len(ran) != 0 {
				t.Errorf("skip ran overdue slots: %v", ran)
			}
			for _, why := range missed {
				if !strings.Contains(why, "skip") && !strings.Contains(why, "failed upstream") {
					t.Errorf("skip: missed without the policy's (or NAS's) reason: %q", why)
				}
			}
		case "runonce":
			// One run for the latest overdue slot when the agent dealt with
			// them; that slot may be one that fell due after the restart.
			switch {
			case len(ran) == 1 && len(missed) == len(overdue)-1:
			case len(ran) == 0 && len(missed) == len(overdue):
				later := supersededBy(missed)
				if later.IsZero() {
					t.Errorf("run_once recorded every overdue slot missed without naming the slot that ran: %v", missed)
					break
				}
				if rs := realRuns(bySlot(runs, id)[later]); len(rs) != 1 || rs[0].state != "succeeded" {
					t.Errorf("run_once: the superseding slot %s did not run once: %s", later.Format(time.RFC3339), describeRuns(rs))
				}
			default:
				t.Errorf("run_once ran %d and missed %d of %d overdue slots, want one run: %v; missed %v", len(ran), len(missed), len(overdue), ran, missed)
			}
		case "runall":
			// run_all catches up at most 10 slots (the runtime's bound) and
			// records the rest missed.
			if want := min(len(overdue), 10); len(ran) != want || len(missed) != len(overdue)-want {
				t.Errorf("run_all ran %d and missed %d of %d overdue slots, want %d runs: %v; missed %v", len(ran), len(missed), len(overdue), want, ran, missed)
			}
			catchUp := 0
			for _, r := range ran {
				if strings.HasPrefix(r, "catch_up:") {
					catchUp++
				}
			}
			if catchUp == 0 {
				t.Errorf("run_all ran no catch_up run: %v", ran)
			}
		}
	}
	// After the outage the jobs fire on time again.
	eventually(t, 15*time.Second, "scheduled runs after the outage", func() (bool, string) {
		runs := foldRuns(readLedger(t, s.home))
		for name, id := range ids {
			ok := false
			for _, r := range runs {
				ok = ok || (r.job == id && r.state == "succeeded" && r.trigger == "scheduled" && r.slot.After(up))
			}
			if !ok {
				return false, name + " has not fired since the agent came back"
			}
		}
		return true, ""
	})
}

// TestSigningKeyRotationLosesNothing: a new signing key is generated with
// chronos keys generate, NAS publishes it, and it is made the signing key
// while a job fires every 2 s: no fire is refused, the fires after the
// switch carry the new kid, and no slot is missing.
func TestSigningKeyRotationLosesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Redis: true, Relays: 1, KeyCheck: 500 * time.Millisecond})
	s.addJob("tick", "every 2s")
	id := s.jobID("tick")
	firstKID := ""
	eventually(t, 20*time.Second, "a first fire", func() (bool, string) {
		for _, f := range s.proxy.records() {
			if f.job == id && f.status == 202 {
				firstKID = f.kid
				return true, ""
			}
		}
		return false, "no fire yet"
	})

	kid := strings.TrimSpace(s.mustCLI("keys", "generate", "--out", "keys"))
	eventually(t, 10*time.Second, "NAS to publish the new key", func() (bool, string) {
		_, body := httpGet(s.publicURL + "/.well-known/jwks.json")
		return strings.Contains(body, kid), body
	})
	s.mustCLI("keys", "activate", "--dir", "keys", kid)
	switched := time.Now()
	eventually(t, 15*time.Second, "three fires signed with the new key", func() (bool, string) {
		n := 0
		for _, f := range s.proxy.records() {
			if f.job == id && f.kid == kid && f.status == 202 {
				n++
			}
		}
		return n >= 3, fmt.Sprintf("%d fires with kid %s", n, kid)
	})
	for _, f := range s.proxy.records() {
		if f.status != 202 && f.status != 200 {
			t.Errorf("a fire signed with %s was answered %d: %s", f.kid, f.status, f.answer)
		}
		if f.kid != kid && f.kid != firstKID {
			t.Errorf("a fire carried an unknown kid %q", f.kid)
		}
		if f.kid == firstKID && f.at.After(switched.Add(5*time.Second)) {
			t.Errorf("a fire at %s still carried the old kid", f.at.Format(time.RFC3339Nano))
		}
	}
	// No slot is missing between the first and the last finished run (a
	// run still in flight when the ledger is read is not judged).
	j := readJobs(t, s.home)[id]
	runs := foldRuns(readLedger(t, s.home))
	last := time.Time{}
	for slot, rs := range bySlot(runs, id) {
		for _, r := range realRuns(rs) {
			if r.state != "claimed" && r.state != "running" && slot.After(last) {
				last = slot
			}
		}
	}
	assertOncePerSlot(t, runs, id, slotsBetween(t, j, j.CreatedAt, last), last)
}

// TestCancelledJobsNeverFireAgain: a removed job and a paused job never fire
// again, while a third job keeps firing; NAS holds no armed fire for either.
func TestCancelledJobsNeverFireAgain(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{})
	s.addJob("removed", "every 2s")
	s.addJob("paused", "every 2s")
	s.addJob("alive", "every 2s")
	removed, paused, alive := s.jobID("removed"), s.jobID("paused"), s.jobID("alive")
	eventually(t, 20*time.Second, "a first run of each job", func() (bool, string) {
		runs := foldRuns(readLedger(t, s.home))
		for _, id := range []string{removed, paused, alive} {
			ok := false
			for _, r := range runs {
				ok = ok || (r.job == id && r.state == "succeeded")
			}
			if !ok {
				return false, id + " has not run"
			}
		}
		return true, ""
	})
	s.mustCLI("jobs", "rm", "--home", s.home, removed)
	s.mustCLI("jobs", "pause", "--home", s.home, "--reason", "e2e", paused)
	cancelled := time.Now()

	// Three more slots of the live job pass.
	eventually(t, 20*time.Second, "three more runs of the live job", func() (bool, string) {
		n := 0
		for _, r := range foldRuns(readLedger(t, s.home)) {
			if r.job == alive && r.state == "succeeded" && r.slot.After(cancelled) {
				n++
			}
		}
		return n >= 3, fmt.Sprintf("%d runs", n)
	})
	for _, r := range foldRuns(readLedger(t, s.home)) {
		if (r.job == removed || r.job == paused) && r.state != "duplicate" && r.slot.After(cancelled) {
			t.Errorf("job %s ran after it was cancelled: %s", r.job, describeRuns([]*run{r}))
		}
	}
	for _, f := range s.proxy.records() {
		if (f.job == removed || f.job == paused) && f.at.After(cancelled.Add(time.Second)) && f.status == 202 {
			t.Errorf("a fire of %s was accepted after it was cancelled", f.job)
		}
	}
	code, body := httpGet(s.publicURL+"/api/agent-cron/list", "Authorization", "Bearer "+s.agentToken)
	if code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	if strings.Contains(body, `"`+removed+`"`) || strings.Contains(body, `"`+paused+`"`) {
		t.Errorf("NAS still holds an armed fire of a cancelled job: %s", body)
	}
	if !strings.Contains(body, `"`+alive+`"`) {
		t.Errorf("NAS does not hold the live job: %s", body)
	}
}
