package notify

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestStreakNext(t *testing.T) {
	t.Parallel()
	type step struct {
		outcome Event
		want    []Event
	}
	f, s := EventFailed, EventSucceeded
	cases := []struct {
		name   string
		policy Policy
		steps  []step
	}{
		{"default alerts on the first failure", Policy{}, []step{
			{f, []Event{f}}, {f, nil}, {s, []Event{s, EventRecovered}}, {s, []Event{s}},
		}},
		{"notify_after 3: five failures then success", Policy{NotifyAfter: 3}, []step{
			{f, nil}, {f, nil}, {f, []Event{f}}, {f, nil}, {f, nil}, {s, []Event{s, EventRecovered}},
		}},
		{"no recovered without an alert", Policy{NotifyAfter: 3}, []step{
			{f, nil}, {f, nil}, {s, []Event{s}}, {f, nil}, {f, nil}, {s, []Event{s}},
		}},
		{"renotify_every 2 after notify_after 2", Policy{NotifyAfter: 2, RenotifyEvery: 2}, []step{
			{f, nil}, {f, []Event{f}}, {f, nil}, {f, []Event{f}}, {f, nil}, {f, []Event{f}}, {s, []Event{s, EventRecovered}},
		}},
		{"missed and interrupted neither count nor reset", Policy{NotifyAfter: 2}, []step{
			{f, nil}, {EventMissed, []Event{EventMissed}}, {EventInterrupted, []Event{EventInterrupted}}, {f, []Event{f}},
		}},
		{"unknown outcomes emit nothing", Policy{}, []step{{"skipped", nil}, {"duplicate", nil}}},
		{"partial is a success: it resets the streak and recovers", Policy{NotifyAfter: 2}, []step{
			{EventPartial, []Event{s, EventPartial}}, {f, nil}, {f, []Event{f}},
			{EventPartial, []Event{s, EventPartial, EventRecovered}}, {f, nil}, {f, []Event{f}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var st Streak
			for i, sp := range c.steps {
				var got []Event
				st, got = st.Next(c.policy, sp.outcome)
				if !slices.Equal(got, sp.want) {
					t.Fatalf("step %d (%s): events %v, want %v (streak %+v)", i, sp.outcome, got, sp.want, st)
				}
			}
		})
	}
}

func TestStreakLoweredThresholdAlerts(t *testing.T) {
	t.Parallel()
	st := Streak{Failures: 4}
	st, got := st.Next(Policy{NotifyAfter: 3}, EventFailed)
	if !slices.Equal(got, []Event{EventFailed}) || !st.Alerted {
		t.Fatalf("a streak already past a lowered notify_after must alert: %v %+v", got, st)
	}
}

// The case through Plan: one failed alert and one recovered for a
// target with the default filter, and nothing for a succeeded-only target
// but the success itself.
func TestPlanFiveFailuresThenSuccess(t *testing.T) {
	t.Parallel()
	alerts := Target{Kind: KindFile, Path: "/var/log/alerts.jsonl"}
	wins := Target{Kind: KindFile, Path: "/var/log/wins.jsonl", On: []Event{EventSucceeded}}
	p := Policy{Targets: []Target{alerts, wins}, NotifyAfter: 3}
	var st Streak
	var all []Notification
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for i := range 6 {
		status := "failed"
		if i == 5 {
			status = "succeeded"
		}
		var ns []Notification
		st, ns = Plan(p, st, Run{JobID: "backup", RunID: "run-" + string(rune('a'+i)), Status: status,
			Slot: t0.Add(time.Duration(i) * time.Hour), Ended: t0.Add(time.Duration(i)*time.Hour + time.Minute)})
		all = append(all, ns...)
	}
	var got []string
	for _, n := range all {
		got = append(got, string(n.Body.Event)+"->"+n.Target.Path)
	}
	want := []string{"failed->/var/log/alerts.jsonl", "succeeded->/var/log/wins.jsonl", "recovered->/var/log/alerts.jsonl"}
	if !slices.Equal(got, want) {
		t.Fatalf("notifications %v, want %v", got, want)
	}
	if all[0].Body.ConsecutiveFailures != 3 || all[2].Body.ConsecutiveFailures != 5 {
		t.Fatalf("consecutive failures %d and %d, want 3 and 5", all[0].Body.ConsecutiveFailures, all[2].Body.ConsecutiveFailures)
	}
	if st != (Streak{}) {
		t.Fatalf("streak after success %+v, want reset", st)
	}
}

func TestPlanBody(t *testing.T) {
	t.Parallel()
	hook := Target{Kind: KindWebhook, URL: "https://hooks.example.com/x"}
	p := Policy{Targets: []Target{hook}}
	out := strings.Repeat("é", MaxOutput) // 2 bytes each: the cut falls inside a rune half the time
	_, ns := Plan(p, Streak{}, Run{JobID: "j", RunID: "r1", Status: "failed", Runner: "shell", Code: 3,
		Duration: 1500 * time.Millisecond, Output: "x" + out, Ledger: "runs/2026-11-24.jsonl#r1"})
	if len(ns) != 1 {
		t.Fatalf("%d notifications, want 1", len(ns))
	}
	b := ns[0].Body
	if b.ExitCode == nil || *b.ExitCode != 3 || b.HTTPStatus != 0 || b.DurationMS != 1500 || b.Status != "failed" {
		t.Fatalf("body %+v", b)
	}
	if len(b.Output) > MaxOutput || !utf8.ValidString(b.Output) || !b.OutputTruncated || b.Output[0] == 'x' {
		t.Fatalf("output tail: %d bytes, valid %v, truncated %v", len(b.Output), utf8.ValidString(b.Output), b.OutputTruncated)
	}
	if b.ID != ns[0].ID || b.ID != NotificationID("r1", EventFailed, hook) || b.Ledger != "runs/2026-11-24.jsonl#r1" {
		t.Fatalf("id %q / %q, ledger %q", b.ID, ns[0].ID, b.Ledger)
	}
	_, ns = Plan(p, Streak{}, Run{JobID: "j", RunID: "r2", Status: "failed", Runner: "http", Code: 502})
	if ns[0].Body.HTTPStatus != 502 || ns[0].Body.ExitCode != nil {
		t.Fatalf("http body %+v", ns[0].Body)
	}
	raw, _ := json.Marshal(ns[0].Body)
	for _, key := range []string{`"id"`, `"event"`, `"job_id"`, `"run_id"`, `"slot"`, `"status"`, `"http_status"`, `"duration_ms"`} {
		if !strings.Contains(string(raw), key) {
			t.Fatalf("body JSON %s lacks %s", raw, key)
		}
	}
}

func TestNotificationIDStable(t *testing.T) {
	t.Parallel()
	a := Target{Kind: KindCommand, Command: []string{"notify-send", "x"}}
	b := Target{Kind: KindCommand, Command: []string{"notify-send x"}}
	id := NotificationID("run", EventFailed, a)
	if id != NotificationID("run", EventFailed, a) {
		t.Fatal("id not stable")
	}
	if !strings.HasPrefix(id, "ntf_") || len(id) != 36 {
		t.Fatalf("id %q", id)
	}
	others := []string{
		NotificationID("run", EventFailed, b), NotificationID("run2", EventFailed, a),
		NotificationID("run", EventRecovered, a),
		NotificationID("run", EventFailed, Target{Kind: KindCommand, Command: []string{"notify-send", "x"}, On: []Event{EventFailed}}),
	}
	if slices.Contains(others[:3], id) {
		t.Fatalf("distinct notifications share id %s: %v", id, others)
	}
	if others[3] != id {
		t.Fatal("the filter is not part of the destination: the id must not depend on it")
	}
}

func TestTail(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"abc", "abc"},
		{"abcdef", "cdef"},
		{"a€b", "€b"},             // € is 3 bytes: the tail is exactly it and b
		{"xa€", "a€"},             // the cut falls before a: nothing to skip
		{"xy€b", "€b"},            // the cut falls after x and y
		{"ab\xe2\x82", "b\uFFFD"}, // a torn rune becomes one replacement
		{"ab\xffc", "\uFFFDc"},    // invalid byte replaced, then cut again to 4 bytes
	}
	for _, c := range cases {
		got := Tail(c.in, 4)
		if got != c.want || len(got) > 4 || !utf8.ValidString(got) {
			t.Errorf("Tail(%q, 4) = %q, want %q", c.in, got, c.want)
		}
	}
}

// A partial fanout parent: succeeded (status partial) to a succeeded
// target, partial to the default filter, nothing to a failed-only target;
// each body carries the children's counts and failed items, and the
// failed alert of an earlier failing parent does too.
func TestPlanPartialFanout(t *testing.T) {
	t.Parallel()
	def := Target{Kind: KindFile, Path: "/var/log/default.jsonl"}
	failedOnly := Target{Kind: KindFile, Path: "/var/log/failed.jsonl", On: []Event{EventFailed}}
	wins := Target{Kind: KindFile, Path: "/var/log/wins.jsonl", On: []Event{EventSucceeded}}
	p := Policy{Targets: []Target{def, failedOnly, wins}}
	counts := &Fanout{Items: 10, Succeeded: 9, Failed: 1, PartialTolerance: 0.1}
	counts.AddFailed(4, "https://e.example/4", "r1.c00005")
	st, ns := Plan(p, Streak{Failures: 2, Alerted: true}, Run{JobID: "scan", RunID: "r1", Status: "partial", Fanout: counts})
	var got []string
	for _, n := range ns {
		got = append(got, string(n.Body.Event)+"->"+n.Target.Path)
		if n.Body.Status != "partial" || n.Body.ExitCode != nil || !reflect.DeepEqual(n.Body.Fanout, counts) {
			t.Fatalf("body %+v (fanout %+v)", n.Body, n.Body.Fanout)
		}
		if n.Body.Fanout == counts {
			t.Fatal("the body shares the run's fanout counts")
		}
	}
	want := []string{"succeeded->/var/log/wins.jsonl", "partial->/var/log/default.jsonl", "recovered->/var/log/default.jsonl"}
	if !slices.Equal(got, want) || st != (Streak{}) {
		t.Fatalf("notifications %v (streak %+v), want %v and a reset streak", got, st, want)
	}
	raw, _ := json.Marshal(ns[1].Body)
	for _, key := range []string{`"fanout":{"items":10,"succeeded":9,"failed":1,"partial_tolerance":0.1,`,
		`"failed_items":[{"index":4,"item":"https://e.example/4","run_id":"r1.c00005"}]`} {
		if !strings.Contains(string(raw), key) {
			t.Fatalf("body JSON %s lacks %s", raw, key)
		}
	}
	_, ns = Plan(p, Streak{}, Run{JobID: "scan", RunID: "r2", Status: "failed", Fanout: counts})
	if len(ns) != 2 || ns[0].Body.Fanout == nil || ns[0].Body.Fanout.Failed != 1 || ns[1].Target.Path != failedOnly.Path {
		t.Fatalf("failed parent notifications %+v", ns)
	}
	if c := ns[0].Clone(); c.Body.Fanout == ns[0].Body.Fanout || !reflect.DeepEqual(c.Body.Fanout, ns[0].Body.Fanout) {
		t.Fatal("Clone shares or loses the fanout counts")
	}
}

func TestFanoutAddFailedBounds(t *testing.T) {
	t.Parallel()
	var f Fanout
	long := strings.Repeat("x", MaxItemText-1) + "é" // the cut falls inside é
	f.AddFailed(0, long, "r.c00001")
	for i := 1; i < MaxFailedItems+5; i++ {
		f.AddFailed(i, "item", "r")
	}
	if len(f.FailedItems) != MaxFailedItems || !f.FailedItemsTruncated {
		t.Fatalf("%d failed items, truncated %v", len(f.FailedItems), f.FailedItemsTruncated)
	}
	first := f.FailedItems[0]
	if !first.ItemTruncated || len(first.Item) != MaxItemText-1 || !utf8.ValidString(first.Item) {
		t.Fatalf("long item cut to %d bytes (truncated %v, valid %v)", len(first.Item), first.ItemTruncated, utf8.ValidString(first.Item))
	}
	if f.FailedItems[1].ItemTruncated || f.FailedItems[MaxFailedItems-1].Index != MaxFailedItems-1 {
		t.Fatalf("items %+v", f.FailedItems[1:3])
	}
	if (*Fanout)(nil).Clone() != nil {
		t.Fatal("nil clone")
	}
}
