package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// scheduleRun runs the binary's entry point with args and returns its outputs.
func scheduleRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestScheduleNext(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string // stdout
	}{
		{"default five in UTC", []string{"schedule", "next", "*/15 * * * *", "--after", "2026-01-01T00:00:00Z"},
			"2026-01-01T00:15:00Z\n2026-01-01T00:30:00Z\n2026-01-01T00:45:00Z\n2026-01-01T01:00:00Z\n2026-01-01T01:15:00Z\n"},
		{"zone flag and count", []string{"schedule", "next", "0 9 * * 1-5", "--tz", "Europe/Paris", "-n", "2", "--after", "2026-01-01T00:00:00Z"},
			"2026-01-01T09:00:00+01:00\n2026-01-02T09:00:00+01:00\n"},
		{"prefix wins over flag", []string{"schedule", "next", "CRON_TZ=America/New_York 30 2 * * *", "--tz", "Asia/Tokyo", "-n", "2", "--after", "2026-03-07T12:00:00-05:00"},
			"2026-03-08T03:00:00-04:00\n2026-03-09T02:30:00-04:00\n"},
		{"fall back fixed-time", []string{"schedule", "next", "30 1 * * *", "--tz", "America/New_York", "-n", "2", "--after", "2026-11-01T00:00:00-04:00"},
			"2026-11-01T01:30:00-04:00\n2026-11-02T01:30:00-05:00\n"},
		{"phrase", []string{"schedule", "next", "every monday 9am", "-n", "1", "--after", "2026-01-01T00:00:00Z"},
			"2026-01-05T09:00:00Z\n"},
		{"interval anchored at --after", []string{"schedule", "next", "every 90s", "-n", "2", "--after", "2026-01-01T00:00:00Z"},
			"2026-01-01T00:01:30Z\n2026-01-01T00:03:00Z\n"},
		{"fraction kept when not zero", []string{"schedule", "next", "every 1h", "-n", "1", "--after", "2026-01-01T00:00:00.25Z"},
			"2026-01-01T01:00:00.25Z\n"},
		{"one-shot prints one line", []string{"schedule", "next", "in 30m", "--after", "2026-01-01T00:00:00Z"},
			"2026-01-01T00:30:00Z\n"},
		{"one-shot after --after", []string{"schedule", "next", "2026-06-18 09:00", "--tz", "Europe/Paris", "--after", "2026-01-01T00:00:00Z"},
			"2026-06-18T09:00:00+02:00\n"},
		{"stops at the last year RFC 3339 can write", []string{"schedule", "next", "@yearly", "--after", "9997-06-01T00:00:00Z"},
			"9998-01-01T00:00:00Z\n9999-01-01T00:00:00Z\n"},
		{"leap day far away", []string{"schedule", "next", "0 0 29 2 */7", "-n", "2", "--after", "2088-03-01T00:00:00Z"},
			"2128-02-29T00:00:00Z\n2156-02-29T00:00:00Z\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := scheduleRun(t, tc.args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if out != tc.want {
				t.Errorf("stdout\n got %q\nwant %q", out, tc.want)
			}
			if errOut != "" {
				t.Errorf("stderr not empty without --explain: %q", errOut)
			}
		})
	}
}

func TestScheduleNextExplain(t *testing.T) {
	t.Parallel()
	code, out, errOut := scheduleRun(t, "schedule", "next", "weekdays at 9am", "--explain", "-n", "1", "--after", "2026-01-01T00:00:00Z")
	if code != exitOK || out != "2026-01-01T09:00:00Z\n" {
		t.Fatalf("exit %d stdout %q", code, out)
	}
	want := `cron "0 9 * * 1-5" in UTC (from the phrase "weekdays at 9am"; fixed-time job)` + "\n"
	if errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
}

func TestScheduleNextDefaultsToNow(t *testing.T) {
	t.Parallel()
	code, out, errOut := scheduleRun(t, "schedule", "next", "* * * * *")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 5 {
		t.Errorf("want 5 lines, got %q", out)
	}
}

func TestScheduleNextErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"never fires", []string{"schedule", "next", "0 0 30 2 *"}, "never fires"},
		{"never fires in short months", []string{"schedule", "next", "0 0 31 4,6,9,11 *"}, "never fires"},
		{"invalid", []string{"schedule", "next", "61 * * * *"}, "out of range"},
		{"unreadable", []string{"schedule", "next", "whenever"}, "cannot read"},
		{"bad zone", []string{"schedule", "next", "@daily", "--tz", "Mars/Olympus"}, "unknown time zone"},
		{"bad prefix zone", []string{"schedule", "next", "CRON_TZ=Mars/Olympus @daily"}, "unknown time zone"},
		{"bad after", []string{"schedule", "next", "@daily", "--after", "tomorrow"}, "--after"},
		{"loose after", []string{"schedule", "next", "@daily", "--after", "2026-01-01T00:00:00"}, "--after"},
		{"zero count", []string{"schedule", "next", "@daily", "-n", "0"}, "-n"},
		{"negative count", []string{"schedule", "next", "@daily", "-n", "-3"}, "-n"},
		{"count not a number", []string{"schedule", "next", "@daily", "-n", "many"}, "invalid argument"},
		{"no expression", []string{"schedule", "next"}, "missing EXPR"},
		{"extra argument", []string{"schedule", "next", "*/5 * * * *", "0"}, "want one EXPR argument, got 2"},
		{"unquoted expression", []string{"schedule", "next", "every", "monday", "9am"}, "want one EXPR argument, got 3"},
		{"passed one-shot", []string{"schedule", "next", "2025-06-18T09:00:00Z", "--after", "2026-01-01T00:00:00Z"}, "never fires after 2026-01-01T00:00:00Z"},
		{"explain passed one-shot", []string{"schedule", "explain", "2025-06-18T09:00:00Z", "--after", "2026-01-01T00:00:00Z"}, "never fires after"},
		{"first fire past year 9999", []string{"schedule", "next", "@yearly", "--after", "9999-06-01T00:00:00Z"}, "never fires after"},
		{"explain extra argument", []string{"schedule", "explain", "@daily", "x"}, "want one EXPR argument"},
		{"unknown subcommand", []string{"schedule", "later"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := scheduleRun(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty: %q", out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, "\n") {
				t.Errorf("stderr is not exactly one line: %q", errOut)
			}
			if !strings.Contains(errOut, tc.msg) {
				t.Errorf("stderr %q does not mention %q", errOut, tc.msg)
			}
		})
	}
}

func TestScheduleExplain(t *testing.T) {
	t.Parallel()
	code, out, errOut := scheduleRun(t, "schedule", "explain", "CRON_TZ=Europe/London @hourly", "--after", "2026-10-25T00:30:00+01:00")
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := `cron "0 * * * *" in Europe/London (from the macro "@hourly"; wildcard job)` + "\n" +
		"2026-10-25T01:00:00+01:00\n2026-10-25T01:00:00Z\n2026-10-25T02:00:00Z\n"
	if out != want {
		t.Errorf("stdout\n got %q\nwant %q", out, want)
	}
}

// TestScheduleNextVectors runs the shared schedule vectors through the command.
func TestScheduleNextVectors(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "schedule", "vectors.txt"))
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "|")
		if len(parts) != 4 {
			t.Fatalf("bad vector line %q", line)
		}
		expr, tz, after := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1]), strings.TrimSpace(parts[2])
		want := strings.Fields(parts[3])
		args := []string{"schedule", "next", expr, "--after", after, "-n", strconv.Itoa(len(want))}
		if tz != "-" {
			args = append(args, "--tz", tz)
		}
		n++
		t.Run(expr+"/"+after, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := scheduleRun(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if got := strings.Fields(out); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%v\n got %v\nwant %v", args, got, want)
			}
		})
	}
	if n == 0 {
		t.Fatal("no vectors")
	}
}

// TestSubSecondInterval: an interval below a second is refused by schedule
// next and jobs add alike, with exit 2 and one line naming the smallest
// interval, and jobs add stores nothing.
func TestSubSecondInterval(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	const want = `interval 500ms is below the smallest of 1s`
	for _, args := range [][]string{
		{"schedule", "next", "every 500ms"},
		{"schedule", "explain", "every 500ms"},
		{"jobs", "add", "--home", home, "--id", "fast", "--schedule", "every 500ms", "--", "true"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			code, out, errOut := cli(t, args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty: %q", out)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.HasSuffix(errOut, want+"\n") {
				t.Errorf("stderr %q: want one line ending in %q", errOut, want)
			}
		})
	}
	if out := mustCLI(t, "jobs", "list", "--home", home, "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("a refused job was stored: %s", out)
	}
	// Whole seconds written in milliseconds are an interval like any other.
	if out := mustCLI(t, "schedule", "next", "every 2000ms", "--after", "2026-01-01T00:00:00Z", "-n", "2"); !strings.Contains(out, "2026-01-01T00:00:02Z") {
		t.Errorf("every 2000ms:\n%s", out)
	}
}
