package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// demoLine matches one step line of the demo's live log.
var demoLine = regexp.MustCompile(`^\s*\+([0-9]+\.[0-9]{3})s  (\S+)\s+(armed|relayed|token verified|claimed|ran|notified|re-armed|duplicate|retry|dropped|cancelled|token refused|warn|error)\s+(.*)$`)

type demoStep struct {
	at           float64
	job, step, d string
}

func parseDemo(t *testing.T, out string) []demoStep {
	t.Helper()
	var steps []demoStep
	for _, line := range strings.Split(out, "\n") {
		m := demoLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatalf("bad time in %q", line)
		}
		steps = append(steps, demoStep{at: at, job: m[2], step: m[3], d: m[4]})
	}
	return steps
}

func TestRunShowsEveryStepAndAFirstFireWithinFiveSeconds(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	var stdout bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	began := time.Now()
	err := Run(ctx, Options{Home: home}, &stdout)
	took := time.Since(began)
	out := stdout.String()
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s", err, out)
	}
	if took < 8*time.Second || took > 25*time.Second {
		t.Errorf("a demo of 8s took %s", took)
	}
	steps := parseDemo(t, out)

	firstRan := -1.0
	for _, s := range steps {
		if s.step == "ran" && s.job == "flaky" {
			if !strings.HasPrefix(s.d, "failed") || !strings.Contains(s.d, "exit 1") {
				t.Errorf("run of flaky did not fail: %s", s.d)
			}
		} else if s.step == "ran" {
			if !strings.HasPrefix(s.d, "succeeded") || !strings.Contains(s.d, "exit 0") {
				t.Errorf("run of %s did not succeed: %s", s.job, s.d)
			}
		}
		if s.step == "ran" {
			if firstRan < 0 {
				firstRan = s.at
			}
		}
		if s.step == "warn" || s.step == "error" || s.step == "token refused" || s.step == "retry" {
			t.Errorf("unexpected step %q for %s: %s", s.step, s.job, s.d)
		}
	}
	if firstRan < 0 || firstRan > 5 {
		t.Fatalf("first fire ran at %+.3fs, want within 5 s of the start\n%s", firstRan, out)
	}

	// Every step of a fire shows, in order, for the interval job.
	want := []string{"armed", "relayed", "token verified", "claimed", "ran"}
	seen := map[string]bool{}
	next := 0
	for _, s := range steps {
		if s.job != "tick" {
			continue
		}
		seen[s.step] = true
		if next < len(want) && s.step == want[next] {
			next++
		}
	}
	if next < len(want) {
		t.Errorf("tick's steps are missing %q in order %v\n%s", want[next], want, out)
	}
	if !seen["re-armed"] {
		t.Errorf("tick was never re-armed\n%s", out)
	}

	// The failing job's streak alerts once (notify_after 1, no reminders):
	// one notified step, naming the file, which holds the one event.
	alerts := filepath.Join(home, alertsFile)
	var notified []demoStep
	for _, s := range steps {
		if s.step == "notified" {
			notified = append(notified, s)
		}
	}
	if len(notified) != 1 || notified[0].job != "flaky" || notified[0].d != "failed → file "+alerts {
		t.Errorf("notified steps %+v, want one for flaky: failed → file %s\n%s", notified, alerts, out)
	}
	if b, err := os.ReadFile(alerts); err != nil || strings.Count(string(b), "\n") != 1 || !strings.Contains(string(b), `"event":"failed"`) {
		t.Errorf("alerts file: %q %v", b, err)
	}

	// The one-shot runs exactly once and is never re-armed.
	onceRuns := 0
	for _, s := range steps {
		if s.job == "once" && s.step == "ran" {
			onceRuns++
		}
		if s.job == "once" && s.step == "re-armed" {
			t.Errorf("the one-shot was re-armed: %s", s.d)
		}
	}
	if onceRuns != 1 {
		t.Errorf("the one-shot ran %d times, want 1\n%s", onceRuns, out)
	}

	// The summary comes from the ledger and agrees with the log.
	if !strings.Contains(out, "Summary after") {
		t.Fatalf("no summary\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^  tick\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary row for tick\n%s", out)
	}
	ticks := 0
	for _, s := range steps {
		if s.job == "tick" && s.step == "ran" {
			ticks++
		}
	}
	if fires, _ := strconv.Atoi(m[1]); fires < 2 || fires < ticks {
		t.Errorf("summary says tick fired %s times; the log shows %d runs", m[1], ticks)
	}
	if m[3] != "0" {
		t.Errorf("summary says tick failed %s times", m[3])
	}
	// --home keeps the ledger.
	if files, _ := filepath.Glob(filepath.Join(home, "runs", "*.jsonl")); len(files) == 0 {
		t.Errorf("no ledger kept in %s", home)
	}
	if _, err := os.Stat(filepath.Join(home, "jobs.json")); err != nil {
		t.Errorf("jobs.json not kept: %v", err)
	}
}

func TestRunRemovesItsTemporaryHome(t *testing.T) {
	t.Parallel()
	var stdout bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := Run(ctx, Options{}, &stdout); err != nil {
		t.Fatalf("Run: %v\n%s", err, stdout.String())
	}
	out := stdout.String()
	m := regexp.MustCompile(`(?m)^  agent  \S+  home (\S+) \(temporary, removed at exit; --home DIR keeps one\)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no temporary home in the banner\n%s", out)
	}
	if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
		t.Errorf("temporary home %s still there after the demo (stat: %v)", m[1], err)
	}
	if !strings.Contains(out, "Summary after") || !strings.Contains(out, "(from the run ledger, removed with the temporary home):") {
		t.Errorf("summary missing or not about a temporary home\n%s", out)
	}
}
