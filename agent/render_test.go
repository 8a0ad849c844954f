package agent_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/schedule"
)

// TestFireListAndWriteSaved: the fire list of a schedule and the text of a
// saved job name its next fires in the schedule's zone; a paused job says
// so instead.
func TestFireListAndWriteSaved(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	after := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := schedule.Parse("0 9 * * *", schedule.Options{Location: paris, Anchor: after})
	if err != nil {
		t.Fatal(err)
	}
	l := agent.NewFireList("0 9 * * *", s, after, 2)
	if l.Expr != "0 9 * * *" || l.Description != s.Describe() || l.Times() != "2026-01-01T09:00:00+01:00\n2026-01-02T09:00:00+01:00\n" {
		t.Fatalf("fire list %+v, times %q", l, l.Times())
	}
	next := l.Fires[0]
	j := job.Job{ID: "brief\x1b[2J", NextRunAt: &next}
	var b strings.Builder
	v := agent.JobView{Job: j, Describe: s.Describe()}
	if err := agent.WriteSaved(&b, "added", v, agent.Fires(s, next.Add(-time.Nanosecond), 3)); err != nil {
		t.Fatal(err)
	}
	want := "added job brief\\x1b[2J\nschedule: " + s.Describe() + "\nnext fires:\n  2026-01-01T09:00:00+01:00\n  2026-01-02T09:00:00+01:00\n  2026-01-03T09:00:00+01:00\n"
	if b.String() != want {
		t.Fatalf("WriteSaved wrote\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	v.NextRunAt = nil
	if err := agent.WriteSaved(&b, "edited", v, nil); err != nil || !strings.HasSuffix(b.String(), "paused: no fires until resumed\n") {
		t.Fatalf("paused job: %q %v", b.String(), err)
	}
}

// TestWriteJobTable: one line per job under the header, the paused reason
// beside the state, "-" for what a job has not got.
func TestWriteJobTable(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	err := agent.WriteJobTable(&b, []job.Job{{ID: "a", Schedule: "every 1h", PausedReason: "maintenance"}, {ID: "b", Name: "Bee", Schedule: "@daily", Enabled: true}})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "ID  NAME") ||
		!strings.Contains(lines[1], "paused (maintenance)") || !strings.Contains(lines[2], "Bee") || !strings.Contains(lines[2], "scheduled") {
		t.Fatalf("table %q %v", b.String(), err)
	}
}
