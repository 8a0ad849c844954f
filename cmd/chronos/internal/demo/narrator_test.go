package demo

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fixedNarrator returns a narrator past its banner whose clock stands 1.5 s
// after start.
func fixedNarrator(w *bytes.Buffer) (*narrator, time.Time) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	n := newNarrator(w, start)
	n.now = func() time.Time { return start.Add(1500 * time.Millisecond) }
	n.release()
	return n, start
}

// sourceLogger returns n's logger for src, "side" or "side/component" (the
// agent names its component in an attribute, as agent/sidecar does).
func sourceLogger(n *narrator, src string) *slog.Logger {
	side, component, _ := strings.Cut(src, "/")
	log := n.logger(side)
	if component != "" {
		log = log.With("component", component)
	}
	return log
}

func TestNarratorTurnsComponentRecordsIntoSteps(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	n, start := fixedNarrator(&w)
	n.setRanDetail(func(jobID, runID string) string { return "exit 0 of " + jobID + "/" + runID })
	fireAt := start.Add(3500 * time.Millisecond)

	nasLog, endpoint, agentLog := n.logger("nas"), sourceLogger(n, "agent/http"), sourceLogger(n, "agent/runtime")
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
		"   +1.500s  -          warn            agent/runtime: slow fsync store.took=2s",
	}
	got := strings.Split(strings.TrimSuffix(w.String(), "\n"), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("narration:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNarratorStepsForFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		source, msg string
		args        []any
		want        string
	}{
		{"nas", "fire not taken; relay retries", []any{"reason", "connection refused"}, "retry           agent not reachable: connection refused"},
		{"nas", "fire dropped", []any{"reason", "job gone"}, "dropped         NAS: job gone"},
		{"agent/http", "fire rejected", []any{"error", "token expired"}, "token refused   token expired"},
		{"agent/http", "fire deferred", []any{"reason", "closing"}, "retry           the agent cannot claim now: closing"},
		{"agent/http", "fire accepted", []any{"run_id", "r9", "skipped", true, "reason", "paused"}, "claimed         slot consumed without a run: paused"},
		{"agent/runtime", "run ended", []any{"run_id", "r9", "state", "failed", "reason", "exit 3"}, "ran             failed (exit 3)"},
		{"relay", "lease lost", []any{"level_of", "x"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.source+" "+tt.msg, func(t *testing.T) {
			t.Parallel()
			var w bytes.Buffer
			n, _ := fixedNarrator(&w)
			sourceLogger(n, tt.source).Info(tt.msg, append([]any{"job_id", "j"}, tt.args...)...)
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

func TestNarratorHoldsStepsUntilTheBannerEnds(t *testing.T) {
	t.Parallel()
	var w bytes.Buffer
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	n := newNarrator(&w, start)
	n.now = func() time.Time { return start.Add(1500 * time.Millisecond) }
	n.header("banner")
	n.logger("nas").Info("cancelled", "job_id", "old")
	n.header("  jobs")
	if got := w.String(); got != "banner\n  jobs\n" {
		t.Fatalf("before release: %q", got)
	}
	n.release()
	n.step("tick", stepRelayed, "now")
	want := "banner\n  jobs\n" +
		"   +1.500s  old        cancelled       NAS removed the armed one-shot\n" +
		"   +1.500s  tick       relayed         now\n"
	if got := w.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNarratorWarningsNameTheirSource(t *testing.T) {
	t.Parallel()
	tests := []struct {
		source, msg string
		want        string
	}{
		// The demo asks NAS for a key made in memory: nothing to warn about.
		{"nas", "signing_keys_dir is not set: using an ephemeral signing key (tokens stop verifying after a restart)", ""},
		{"nas", "something odd", "warn            nas: something odd"},
		{"agent/fireauth", "key set refresh failed", "warn            agent/fireauth: key set refresh failed"},
		{"agent", "ready before the first reconcile finished", "warn            agent: ready before the first reconcile finished"},
		// A record the narrator knows, from a component that does not log it.
		{"agent/reconcile", "run ended", "warn            agent/reconcile: run ended"},
	}
	for _, tt := range tests {
		t.Run(tt.source+" "+tt.msg, func(t *testing.T) {
			t.Parallel()
			var w bytes.Buffer
			n, _ := fixedNarrator(&w)
			sourceLogger(n, tt.source).Warn(tt.msg)
			want := ""
			if tt.want != "" {
				want = "   +1.500s  -          " + tt.want + "\n"
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
