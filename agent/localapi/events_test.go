package localapi_test

import (
	"bufio"
	"encoding/json"
	"net/http"
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
	resp, err := http.Get(e.base + "/api/events")
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
