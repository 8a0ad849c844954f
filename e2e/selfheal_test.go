package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// operator POSTs an operator route on NAS's internal listener.
func (s *system) operator(path string) {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.internalURL+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.opToken)
	resp, err := httpClient.Do(req)
	if err != nil {
		s.t.Fatalf("operator %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("operator %s: %d", path, resp.StatusCode)
	}
}

// list returns NAS's list for the agent (status 0 when NAS is down).
func (s *system) list() (contract.ListResponse, int) {
	code, body := httpGet(s.publicURL+contract.PathList, "Authorization", "Bearer "+s.agentToken)
	var l contract.ListResponse
	if code == http.StatusOK {
		_ = json.Unmarshal([]byte(body), &l)
	}
	return l, code
}

// runsOf returns the folded runs of job by slot.
func (s *system) runsOf(job string) map[time.Time][]*run {
	return bySlot(foldRuns(readLedger(s.t, s.home)), job)
}

// firstScheduledAfter returns the earliest slot after t that job ran on
// schedule and succeeded.
func (s *system) firstScheduledAfter(job string, t time.Time) (time.Time, bool) {
	var best time.Time
	for slot, rs := range s.runsOf(job) {
		for _, r := range rs {
			if r.state == "succeeded" && r.trigger == "scheduled" && slot.After(t) && (best.IsZero() || slot.Before(best)) {
				best = slot
			}
		}
	}
	return best, !best.IsZero()
}

// TestOperatorStopThenStartResumesWithoutARestart: an operator stops the
// agent's instance at NAS while a job fires every 2 s, then starts it again.
// Without the agent restarting (and with its resync timer at the default 5
// minutes), NAS's reconcile request makes it record every slot that passed
// while the instance was stopped missed, with NAS's reason, run none of
// them, and the job fires again at its next slots.
func TestOperatorStopThenStartResumesWithoutARestart(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{})
	job := s.addJob("tick", "every 2s")
	eventually(t, 20*time.Second, "a first scheduled run", func() (bool, string) {
		_, ok := s.firstScheduledAfter(job, time.Time{})
		return ok, "none yet"
	})
	agent := s.agents[0]
	pid := agent.cmd.Process.Pid

	stopped := time.Now()
	s.operator("/api/operator/instances/" + instanceID + "/stop")
	// The outage: four slots pass while NAS drops the instance's fires.
	time.Sleep(time.Until(stopped.Add(8 * time.Second)))
	l, _ := s.list()
	if l.Instance == nil || !l.Instance.Stopped || l.Instance.StoppedAt == nil {
		t.Fatalf("NAS does not list the instance as stopped: %+v", l.Instance)
	}
	started := time.Now()
	s.operator("/api/operator/instances/" + instanceID + "/start")

	var resumed time.Time
	eventually(t, 15*time.Second, "the job to fire again after the start", func() (bool, string) {
		var ok bool
		resumed, ok = s.firstScheduledAfter(job, started)
		return ok, "no scheduled run since the start"
	})
	if !agent.running() || agent.cmd.Process.Pid != pid {
		t.Fatal("the agent restarted")
	}
	nudged := false
	for _, f := range s.proxy.records() {
		if f.path == contract.PathReconcile && f.status == http.StatusAccepted && strings.Contains(f.answer, "reconciling") {
			nudged = true
		}
		if f.path == contract.PathFire && f.job == job && f.status == http.StatusAccepted && f.at.After(stopped.Add(time.Second)) && f.at.Before(started) {
			t.Errorf("a fire reached the agent while its instance was stopped: %+v", f)
		}
	}
	if !nudged {
		t.Error("NAS did not ask the agent to reconcile (no 202 reconciling through the callback)")
	}

	// Every slot of the stop is missed with NAS's reason; none ran.
	j := readJobs(t, s.home)[job]
	runs := s.runsOf(job)
	within := slotsBetween(t, j, stopped.Add(time.Second), started.Add(-time.Second))
	if len(within) < 3 {
		t.Fatalf("only %d slots fell within the stop", len(within))
	}
	for _, slot := range within {
		rs := realRuns(runs[slot])
		if len(rs) != 1 || rs[0].state != "missed" || !strings.Contains(rs[0].reason, "stopped") || !strings.Contains(rs[0].reason, "NAS") {
			t.Errorf("slot %s within the stop: %s, want one missed line with NAS's reason", slot.Format(time.RFC3339), describeRuns(runs[slot]))
		}
	}
	// From the first run to the resumed one, every slot has exactly one line.
	first, _ := s.firstScheduledAfter(job, time.Time{})
	for _, slot := range slotsBetween(t, j, first.Add(-time.Millisecond), resumed) {
		if rs := realRuns(runs[slot]); len(rs) != 1 {
			t.Errorf("slot %s: %d lines, want exactly one: %s", slot.Format(time.RFC3339), len(rs), describeRuns(runs[slot]))
		}
	}
}

// TestRedisLostWhileTheAgentIsAwake: redis-server is restarted without
// persistence, so NAS forgets every armed fire. The agent, awake and with
// nothing changing (its jobs fire hourly and daily), arms every job again
// within one resync interval. Then it happens again with a job that fires
// every 2 s, whose lost fire must not stop it: it keeps running, every slot
// accounted for once.
func TestRedisLostWhileTheAgentIsAwake(t *testing.T) {
	t.Parallel()
	const resync = 3 * time.Second
	srv := redistest.Start(t, redistest.Options{})
	s := newSystem(t, systemOptions{RedisURL: srv.URL() + "/0?prefix=lost", Resync: resync})
	jobs := []string{s.addJob("hourly", "every 1h"), s.addJob("daily", "0 9 * * *")}
	armedAll := func() (bool, string) {
		l, code := s.list()
		if code != http.StatusOK {
			return false, fmt.Sprintf("list answered %d", code)
		}
		stored := readJobs(t, s.home)
		held := map[string]bool{}
		for _, a := range l.Armed {
			if j := stored[a.JobID]; j.NextRunAt != nil && a.FireAt.Equal(*j.NextRunAt) {
				held[a.JobID] = true
			}
		}
		for _, job := range jobs {
			if !held[job] {
				return false, fmt.Sprintf("%s not armed at its next slot: %+v", job, l.Armed)
			}
		}
		return true, ""
	}
	lose := func() time.Time {
		t.Helper()
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "NAS to answer on the empty store", func() (bool, string) {
			l, code := s.list()
			return code == http.StatusOK, fmt.Sprintf("list answered %d %+v", code, l)
		})
		return time.Now()
	}

	eventually(t, 10*time.Second, "every job armed", armedAll)
	lost := lose()
	if l, _ := s.list(); len(l.Armed) != 0 {
		// Only a resync falling in these milliseconds could have armed them.
		t.Logf("NAS held %d fires right after Redis lost its data", len(l.Armed))
	}
	eventually(t, resync+2*time.Second, "every job armed again within one resync interval", armedAll)
	t.Logf("every job armed again %s after the store answered empty (resync %s)", time.Since(lost).Round(time.Millisecond), resync)

	jobs = append(jobs, s.addJob("tick", "every 2s"))
	eventually(t, 20*time.Second, "a first run of tick", func() (bool, string) {
		_, ok := s.firstScheduledAfter("tick", time.Time{})
		return ok, "none yet"
	})
	lost = lose()
	eventually(t, resync+2*time.Second, "every job armed again", armedAll)
	eventually(t, 15*time.Second, "tick to keep running", func() (bool, string) {
		_, ok := s.firstScheduledAfter("tick", lost.Add(resync))
		return ok, "no scheduled run since"
	})
	// No slot of tick is unaccounted for or handled twice.
	j := readJobs(t, s.home)["tick"]
	runs := s.runsOf("tick")
	first, _ := s.firstScheduledAfter("tick", time.Time{})
	last, _ := s.firstScheduledAfter("tick", lost.Add(resync))
	for _, slot := range slotsBetween(t, j, first.Add(-time.Millisecond), last) {
		rs := realRuns(runs[slot])
		if len(rs) != 1 {
			t.Errorf("tick slot %s: %d lines, want one: %s", slot.Format(time.RFC3339), len(rs), describeRuns(runs[slot]))
			continue
		}
		if slot.After(lost) && rs[0].trigger != "scheduled" && !strings.Contains(rs[0].reason, "no fire arrived") {
			t.Errorf("tick slot %s after the loss was handled without saying no fire arrived: %s", slot.Format(time.RFC3339), describeRuns(rs))
		}
	}
}

// TestNASDownLongerThanTheGrace: NAS (on Redis, with its own dispatcher) is
// killed before a slot and stays down for longer than the job's grace. The
// awake agent runs the slot once through the misfire policy; when NAS is
// back, nothing runs twice (NAS's late fire for the slot, if it comes, is
// answered duplicate) and the job fires on schedule again.
func TestNASDownLongerThanTheGrace(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{Redis: true})
	job := s.addJob("beat", "every 8s", "--grace", "2s")
	eventually(t, 30*time.Second, "a first scheduled run", func() (bool, string) {
		_, ok := s.firstScheduledAfter(job, time.Time{})
		return ok, "none yet"
	})
	var slot time.Time
	eventually(t, 10*time.Second, "NAS to hold the next slot", func() (bool, string) {
		j := readJobs(t, s.home)[job]
		a := s.armed(job)
		if j.NextRunAt == nil || !a.FireAt.Equal(*j.NextRunAt) || !a.FireAt.After(time.Now().Add(time.Second)) {
			return false, fmt.Sprintf("armed %s, next_run_at %v", a.FireAt, j.NextRunAt)
		}
		slot = a.FireAt.Time
		return true, ""
	})
	s.nas.kill()
	down := time.Now()
	eventually(t, 20*time.Second, "the backstop to run the slot", func() (bool, string) {
		rs := realRuns(s.runsOf(job)[slot])
		return len(rs) == 1 && rs[0].state == "succeeded", describeRuns(rs)
	})
	ran := realRuns(s.runsOf(job)[slot])[0]
	if ran.trigger != "catch_up" || !strings.Contains(ran.reason, "NAS unreachable") {
		t.Errorf("the slot ran as %s (%q), want a catch_up run saying NAS was unreachable", ran.trigger, ran.reason)
	}
	for _, l := range readLedger(t, s.home) {
		if l.RunID == ran.id && l.State == "claimed" && l.LatenessMS < 2000 {
			t.Errorf("the slot ran %d ms late, within its 2 s grace", l.LatenessMS)
		}
	}
	// NAS stays down past the grace (it is), then comes back.
	time.Sleep(time.Until(down.Add(time.Second)))
	s.nas.restart()
	waitReady(t, s.nas, s.publicURL+"/readyz", 30*time.Second)
	back := time.Now()
	eventually(t, 30*time.Second, "a scheduled run after NAS is back", func() (bool, string) {
		_, ok := s.firstScheduledAfter(job, back)
		return ok, "none yet"
	})
	late := 0
	for _, f := range s.proxy.records() {
		if f.path != contract.PathFire || f.job != job || !f.fireAt.Equal(slot) {
			continue
		}
		late++
		if f.status != http.StatusOK || !strings.Contains(f.answer, `"duplicate"`) {
			t.Errorf("NAS's late fire for the slot the backstop ran was answered %d %s, want duplicate", f.status, f.answer)
		}
	}
	t.Logf("NAS delivered its fire for the slot %d time(s) after it came back", late)
	runs := s.runsOf(job)
	j := readJobs(t, s.home)[job]
	first, _ := s.firstScheduledAfter(job, time.Time{})
	last, _ := s.firstScheduledAfter(job, back)
	for _, sl := range slotsBetween(t, j, first.Add(-time.Millisecond), last) {
		if rs := realRuns(runs[sl]); len(rs) != 1 {
			t.Errorf("slot %s: %d lines, want exactly one: %s", sl.Format(time.RFC3339), len(rs), describeRuns(runs[sl]))
		}
	}
}

// TestLeapDayJobIsInSync: a job that fires only on 29 February, more than
// NAS's 400-day horizon away, is armed as a refresh fire within the horizon;
// the agent is in sync and exits when idle.
func TestLeapDayJobIsInSync(t *testing.T) {
	t.Parallel()
	s := newSystem(t, systemOptions{IdleExit: 3 * time.Second})
	job := s.addJob("leap", "0 0 29 2 *")
	j := readJobs(t, s.home)[job]
	if j.NextRunAt == nil || time.Until(*j.NextRunAt) < 400*24*time.Hour {
		t.Fatalf("the next 29 February is not beyond the horizon: %v", j.NextRunAt)
	}
	a := s.armed(job)
	if !a.FireAt.After(time.Now()) || time.Until(a.FireAt.Time) > 365*24*time.Hour {
		t.Fatalf("armed at %s, not within the 365-day horizon", a.FireAt)
	}
	if gap := j.NextRunAt.Sub(a.FireAt.Time); gap <= 0 || gap%(365*24*time.Hour) != 0 {
		t.Fatalf("armed at %s, %s before the slot %s: not a refresh point", a.FireAt, gap, j.NextRunAt)
	}
	agent := s.agents[0]
	eventually(t, 20*time.Second, "the agent to exit when idle", func() (bool, string) { return !agent.running(), "still running" })
	if agent.err != nil {
		t.Fatalf("the agent exited with %v, want status 0", agent.err)
	}
	if !strings.Contains(agent.out.String(), `"reason":"idle"`) {
		t.Errorf("the agent did not say it stopped for idleness")
	}
	out := s.mustCLI("agent", "status", "--config", "agent-1.yaml", "--json")
	var st struct {
		InSync *bool `json:"in_sync"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.InSync == nil || !*st.InSync {
		t.Fatalf("agent status says in_sync %v (%v):\n%s", st.InSync, err, out)
	}
	if _, err := os.Stat(filepath.Join(s.home, "jobs.json")); err != nil {
		t.Fatal(err)
	}
	if runs := s.runsOf(job); len(runs) != 0 {
		t.Fatalf("the leap-day job ran: %v", runs)
	}
}
