package demo

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fixedNarrator returns a narrator whose clock stands 1.5 s after start.
func fixedNarrator(w *bytes.Buffer) (*narrator, time.Time) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	n := newNarrator(w, start)
	n.now = func() time.Time { return start.Add(1500 * time.Millisecond) }
	return n, start
}

func TestNarratorTurnsComponentRecordsIntoSteps(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	n, start := fixedNarrator(&w)
	n.setRanDetail(func(jobID, runID string) string { return "exit 0 of " + jobID + "/" + runID })
	fireAt := start.Add(3500 * time.Millisecond)

	nasLog, endpoint, agentLog := n.logger("nas"), n.logger("agenthttp"), n.logger("agent")
	nasLog.Info("armed", "job_id", "tick", "fire_at", fireAt, "schedule_id", "sch_1")
	nasLog.Info("fire delivered", "job_id", "tick")
	endpoint.With("job_id", "tick").Info("fire accepted", "run_id", "r1", "fire_at", fireAt.Format(time.RFC3339Nano))
	agentLog.Info("run started", "job_id", "tick", "run_id", "r1")
	agentLog.Info("run ended", "job_id", "tick", "run_id", "r1", "state", "succeeded")
	nasLog.Info("armed", "job_id", "tick", "fire_at", fireAt, "schedule_id", "sch_2")
	agentLog.WithGroup("store").Warn("slow fsync", "took", "2s")
	agentLog.Info("something routine")

	want := []string{
		"   +1.500s  tick       armed           fire_at 12:00:03.500Z (in 2s)  schedule sch_1",
		"   +1.500s  tick       claimed         run r1 (claimed -2s after fire_at)",
		"   +1.500s  tick       ran             succeeded in 0s, exit 0 of tick/r1",
		"   +1.500s  tick       re-armed        fire_at 12:00:03.500Z (in 2s)  schedule sch_2",
		"   +1.500s  -          warn            agent: slow fsync store.took=2s",
	}
	got := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("narration:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNarratorStepsForFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		component, msg string
		args           []any
		want           string
	}{
		{"nas", "fire not taken; relay retries", []any{"reason", "connection refused"}, "retry           agent not reachable: connection refused"},
		{"nas", "fire dropped", []any{"reason", "job gone"}, "dropped         NAS: job gone"},
		{"agenthttp", "fire rejected", []any{"error", "token expired"}, "token refused   token expired"},
		{"agenthttp", "fire deferred", []any{"reason", "closing"}, "retry           the agent cannot claim now: closing"},
		{"agenthttp", "fire accepted", []any{"run_id", "r9", "skipped", true, "reason", "paused"}, "claimed         slot consumed without a run: paused"},
		{"agent", "run ended", []any{"run_id", "r9", "state", "failed", "reason", "exit 3"}, "ran             failed (exit 3)"},
		{"relay", "lease lost", []any{"level_of", "x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.component+" "+tt.msg, func(t *testing.T) {
			t.Parallel()
			var w bytes.Buffer
			n, _ := fixedNarrator(&w)
			n.logger(tt.component).Info(tt.msg, append([]any{"job_id", "j"}, tt.args...)...)
			want := ""
			if tt.want != "" {
				want = "   +1.500s  j          " + tt.want + "\n"
			}
			if w.String() != want {
				t.Errorf("got %q, want %q", w.String(), want)
			}
		})
	}
}

func TestObserveHandlerFlattensGroupsAndAttrs(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	n, _ := fixedNarrator(&w)
	log := n.logger("relay").With("job_id", "j").WithGroup("lease").With("attempt", 2).WithGroup("")
	if log.Enabled(t.Context(), slog.LevelDebug) {
		t.Error("debug records are passed on")
	}
	log.Error("deliver failed", slog.Group("http", "status", 502))
	want := "   +1.500s  j          error           relay: deliver failed lease.attempt=2 lease.http.status=502\n"
	if w.String() != want {
		t.Errorf("got %q, want %q", w.String(), want)
	}
}

func TestRoundDurAndClock(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{181 * time.Microsecond, "181µs"},
		{4213 * time.Microsecond, "4ms"},
		{4213 * time.Millisecond, "4.213s"},
		{-2 * time.Second, "-2s"},
		{12345 * time.Millisecond, "12.3s"},
	} {
		if got := roundDur(tt.d); got != tt.want {
			t.Errorf("roundDur(%s) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := clock(time.Date(2026, 3, 1, 13, 4, 5, 6e6, time.FixedZone("CET", 3600))); got != "12:04:05.006Z" {
		t.Errorf("clock = %q", got)
	}
	if got := clock(time.Time{}); got != "?" {
		t.Errorf("clock(zero) = %q", got)
	}
}
