package localapi_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/localapi"
)

// TestEventStreamInOrderAndResume: the stream delivers a job's change and
// its run's ledger lines in order with increasing ids; a client resuming
// with Last-Event-ID gets exactly the events after it, none lost, none
// repeated, and then the new ones.
func TestEventStreamInOrderAndResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s1 := e.subscribe(t, "")
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("ev", "echo one; echo two"), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/ev/run", `{"force":false,"wait":true}`, &run)

	var got []sse
	var states []ledger.State
	for len(states) == 0 || !states[len(states)-1].Terminal() {
		ev := <-s1.events
		got = append(got, ev)
		if ev.event == localapi.EventRun {
			var line ledger.Entry
			if err := json.Unmarshal([]byte(ev.data), &line); err != nil {
				t.Fatal(err)
			}
			if line.RunID == run.RunID {
				states = append(states, line.State)
			}
		}
	}
	if len(states) < 2 || states[len(states)-2] != ledger.StateRunning || states[len(states)-1] != ledger.StateSucceeded {
		t.Fatalf("run lines %v", states)
	}
	if got[0].event != localapi.EventJob {
		t.Fatalf("first event %+v, want the job's", got[0])
	}
	var prev uint64
	for _, ev := range got {
		id, err := strconv.ParseUint(ev.id, 10, 64)
		if err != nil || id <= prev {
			t.Fatalf("id %q after %d", ev.id, prev)
		}
		prev = id
	}

	s1.close()
	s2 := e.subscribe(t, got[0].id)
	for i, want := range got[1:] {
		ev := <-s2.events
		if ev != want {
			t.Fatalf("resumed event %d: %+v, want %+v", i, ev, want)
		}
	}
	e.must(t, http.StatusOK, "POST", "/api/jobs/ev/pause", `{"reason":"quiet"}`, nil)
	// The job's own changes (its last status, then the pause) follow, each
	// with a greater id.
	for {
		ev := s2.next(t, localapi.EventJob)
		id, _ := strconv.ParseUint(ev.id, 10, 64)
		var j localapi.JobInfo
		if err := json.Unmarshal([]byte(ev.data), &j); err != nil || id <= prev {
			t.Fatalf("after resume: %+v (%v)", ev, err)
		}
		prev = id
		if j.State == "paused" && j.PausedReason == "quiet" {
			break
		}
	}
	e.must(t, http.StatusOK, "DELETE", "/api/jobs/ev", "", nil)
	if ev := s2.next(t, localapi.EventJobRemoved); ev.data != `{"id":"ev"}` {
		t.Fatalf("removed: %+v", ev)
	}
}

// TestEventStreamResetsAnUnknownPast: a client resuming from an id of an
// earlier agent process is told to read the state again.
func TestEventStreamResetsAnUnknownPast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.subscribe(t, "1")
	s.next(t, localapi.EventReset)
}

// TestEventStreamHeartbeat: an idle stream gets heartbeat comments.
func TestEventStreamHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{events: localapi.EventOptions{Heartbeat: 20 * time.Millisecond}})
	req, err := http.NewRequest(http.MethodGet, e.base+"/api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), ": heartbeat ") {
			return
		}
	}
	t.Fatalf("the stream ended without a heartbeat: %v", sc.Err())
}

// TestEventStreamCarriesOtherProcessesLines: the run and chain lines
// another process appends to the home's ledger (a chain started, a run by
// `jobs run --here`) reach the stream, each once, as the same events the
// agent's own lines make; the agent's own lines are not repeated.
func TestEventStreamCarriesOtherProcessesLines(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := e.subscribe(t, "")
	e.must(t, http.StatusCreated, "POST", "/api/jobs", shellSpec("own", "true"), nil)
	var run localapi.RunInfo
	e.must(t, http.StatusOK, "POST", "/api/jobs/own/run", `{"force":false,"wait":true}`, &run)

	lg, err := ledger.Open(filepath.Join(e.home, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	chainLine := ledger.Entry{Time: now, RunID: "c-other", JobID: "nightly", State: ledger.ChainStarted, Slot: now,
		Kind: ledger.KindChain, Chain: &ledger.ChainRef{ID: "nightly", Class: "etl"}}
	runLine := ledger.Entry{Time: now, RunID: "r-other", JobID: "elsewhere", State: ledger.StateClaimed, Slot: now, Trigger: "manual", Token: 7}
	last := runLine
	last.State, last.Time = ledger.StateSucceeded, now.Add(time.Second)
	for _, l := range []ledger.Entry{chainLine, runLine, last} {
		if err := lg.Append(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}

	seen := map[string]int{}
	var others []sse
	timeout := time.After(15 * time.Second)
	for seen["r-other/succeeded"] == 0 {
		var ev sse
		select {
		case next, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended: %v", seen)
			}
			ev = next
		case <-timeout:
			t.Fatalf("the other process's lines did not come: %v", seen)
		}
		if ev.event != localapi.EventRun && ev.event != localapi.EventChain {
			continue
		}
		var line ledger.Entry
		if err := json.Unmarshal([]byte(ev.data), &line); err != nil {
			t.Fatal(err)
		}
		seen[line.RunID+"/"+string(line.State)]++
		if strings.HasSuffix(line.RunID, "-other") {
			others = append(others, ev)
		}
	}
	// The agent's lines came before the other's in the file: had they been
	// told again, it would have been by now.
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("line %s told %d times (%v)", k, n, seen)
		}
	}
	if seen[run.RunID+"/running"] != 1 || seen[run.RunID+"/succeeded"] != 1 {
		t.Fatalf("the agent's own run lines: %v", seen)
	}
	if len(others) != 3 {
		t.Fatalf("the other process's events: %+v, want 3", others)
	}
	for i, want := range []struct {
		typ  string
		line ledger.Entry
	}{{localapi.EventChain, chainLine}, {localapi.EventRun, runLine}, {localapi.EventRun, last}} {
		data, err := json.Marshal(want.line)
		if err != nil {
			t.Fatal(err)
		}
		if got := others[i]; got.event != want.typ || got.data != string(data) {
			t.Fatalf("event %d: %s %s, want %s %s", i, got.event, got.data, want.typ, data)
		}
	}
}
