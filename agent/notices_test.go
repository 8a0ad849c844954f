package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// receiver is a webhook receiver: it answers the statuses of answers in
// turn (200 once they run out) and records each request's webhook-id.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	answers []int
	ids     []string // webhook-id of every request, in order
	ok      map[string]int
	bodies  map[string]notify.Body
}

func newReceiver(t *testing.T, answers ...int) *receiver {
	t.Helper()
	rc := &receiver{answers: answers, ok: map[string]int{}, bodies: map[string]notify.Body{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b notify.Body
		_ = json.NewDecoder(r.Body).Decode(&b)
		id := r.Header.Get("webhook-id")
		rc.mu.Lock()
		rc.ids = append(rc.ids, id)
		status := http.StatusOK
		if len(rc.answers) > 0 {
			status, rc.answers = rc.answers[0], rc.answers[1:]
		}
		if status < 300 {
			rc.ok[id]++
			rc.bodies[id] = b
		}
		rc.mu.Unlock()
		if r.Header.Get("Idempotency-Key") != id {
			status = http.StatusBadRequest
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) snapshot() ([]string, map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ok := make(map[string]int, len(rc.ok))
	for k, v := range rc.ok {
		ok[k] = v
	}
	return append([]string(nil), rc.ids...), ok
}

// loopback lets webhooks reach the test's receivers, with quick retries.
func loopback(c *Config) {
	c.Now = time.Now
	c.NotifyAddresses = notify.AddressPolicy{AllowPrivate: true}
	c.Notify = notify.Options{Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Poll: 50 * time.Millisecond}
}

// notifying runs rt's notifier until the test ends.
func notifying(t *testing.T, rt *Runtime) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.RunNotifier(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("notifier: %v", err)
		}
	})
}

// notificationLines waits for n notification lines in rt's ledger (as they
// are appended) and returns them.
func notificationLines(t *testing.T, rt *Runtime, n int) []ledger.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		es, err := rt.Ledger().Entries(ctx, ledger.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []ledger.Entry
		for _, e := range es {
			if e.Kind == ledger.KindNotification {
				out = append(out, e)
			}
		}
		if len(out) >= n {
			return out
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d notification lines, want %d: %+v", len(out), n, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runOnce runs job id through the gate, ending with err.
func (b *bundle) runOnce(t *testing.T, id string, err error) ledger.Run {
	t.Helper()
	res, rerr := b.rt.RunNow(context.Background(), id, RunOptions{Force: true})
	if rerr != nil || res.Status != FireAccepted {
		t.Fatalf("run now: %+v %v", res, rerr)
	}
	b.gate.finish(b.started(t), err)
	return b.wait(t, res.RunID)
}

// TestWebhookRetriedThroughRuntime: a receiver that answers 503 three times
// and then 200 gets the notification four times, always with the same
// webhook-id (the id the run's write stored), and it is recorded sent once.
func TestWebhookRetriedThroughRuntime(t *testing.T) {
	rc := newReceiver(t, 503, 503, 503)
	b := setup(t, loopback)
	b.add(t, JobSpec{ID: "hook", Schedule: "every 1h", Notify: notify.Policy{Targets: []notify.Target{
		{Kind: notify.KindWebhook, URL: rc.srv.URL, On: []notify.Event{notify.EventSucceeded}}}}})
	notifying(t, b.rt)
	run := b.runOnce(t, "hook", nil)

	lines := notificationLines(t, b.rt, 1)
	ids, ok := rc.snapshot()
	if len(ids) != 4 {
		t.Fatalf("receiver got %d requests, want 4", len(ids))
	}
	want := notify.NotificationID(run.RunID, notify.EventSucceeded, b.job(t, "hook").Targets[0])
	for _, id := range ids {
		if id != want {
			t.Fatalf("webhook-ids %v, want all %s", ids, want)
		}
	}
	if ok[want] != 1 {
		t.Fatalf("accepted %d times", ok[want])
	}
	if len(lines) != 1 || lines[0].State != ledger.StateSent || lines[0].Notification != want ||
		lines[0].Event != "succeeded" || lines[0].RunID != run.RunID || lines[0].Attempt != 4 {
		t.Fatalf("notification lines %+v", lines)
	}
	row, err := outboxOf(t, b.rt).Get(context.Background(), want)
	if err != nil || row.State != notify.StateSent || row.Attempts != 4 {
		t.Fatalf("outbox row %+v %v", row, err)
	}
	if got := rc.bodies[want]; got.Ledger == "" || !strings.HasSuffix(got.Ledger, "#"+run.RunID) || got.Status != "succeeded" {
		t.Fatalf("body %+v", got)
	}
	// runs list is not disturbed by the notification line.
	if runs := b.runs(t, "hook"); len(runs) != 1 || runs[0].State != ledger.StateSucceeded {
		t.Fatalf("runs %+v", runs)
	}
	if j := b.job(t, "hook"); len(j.Outbound) != 0 {
		t.Fatalf("rows still waiting in jobs.json: %+v", j.Outbound)
	}
}

// TestFailureStreakThroughRuntime: five failures under notify_after 3, then
// a success: one failed alert (at the third failure) and one recovered.
func TestFailureStreakThroughRuntime(t *testing.T) {
	b := setup(t, loopback)
	out := filepath.Join(b.home, "alerts.jsonl")
	b.add(t, JobSpec{ID: "flaky", Schedule: "every 1h", Notify: notify.Policy{NotifyAfter: 3,
		Targets: []notify.Target{{Kind: notify.KindFile, Path: out}}}})
	notifying(t, b.rt)
	for range 5 {
		b.runOnce(t, "flaky", errors.New("boom"))
	}
	b.runOnce(t, "flaky", nil)
	lines := notificationLines(t, b.rt, 2)
	if len(lines) != 2 || lines[0].Event != "failed" || lines[1].Event != "recovered" {
		t.Fatalf("notification lines %+v", lines)
	}
	events := readEvents(t, out)
	if len(events) != 2 || events[0].Event != notify.EventFailed || events[0].ConsecutiveFailures != 3 ||
		events[1].Event != notify.EventRecovered || events[1].ConsecutiveFailures != 5 {
		t.Fatalf("file target got %+v", events)
	}
	if j := b.job(t, "flaky"); j.NotifyStreak != (notify.Streak{}) || len(j.Outbound) != 0 {
		t.Fatalf("job after recovery: streak %+v, outbound %d", j.NotifyStreak, len(j.Outbound))
	}
}

func readEvents(t *testing.T, path string) []notify.Body {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []notify.Body
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var b notify.Body
		if err := json.Unmarshal(sc.Bytes(), &b); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, b)
	}
	return out
}

// TestTwoRuntimesSendEachNotificationOnce: two runtimes on one home, each
// running its notifier, share the outbox: every notification reaches the
// receiver exactly once.
func TestTwoRuntimesSendEachNotificationOnce(t *testing.T) {
	rc := newReceiver(t)
	b := setup(t, loopback)
	cfg := b.rt.cfg
	cfg.Runners = map[string]runner.Runner{"gate": b.gate}
	other, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	b.add(t, JobSpec{ID: "both", Schedule: "every 1h", Overlap: "allow", Notify: notify.Policy{Targets: []notify.Target{
		{Kind: notify.KindWebhook, URL: rc.srv.URL, On: []notify.Event{notify.EventSucceeded, notify.EventFailed}}}}})
	notifying(t, b.rt)
	notifying(t, other)
	const runs = 12
	for i := range runs {
		rt := b.rt
		if i%2 == 1 {
			rt = other
		}
		res, err := rt.RunNow(context.Background(), "both", RunOptions{Force: true})
		if err != nil || res.Status != FireAccepted {
			t.Fatalf("run now: %+v %v", res, err)
		}
		b.gate.finish(b.started(t), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := rt.Wait(ctx, res.RunID, time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	lines := notificationLines(t, b.rt, runs)
	ids, ok := rc.snapshot()
	if len(ids) != runs || len(ok) != runs || len(lines) != runs {
		t.Fatalf("%d requests for %d ids, %d lines; want %d of each", len(ids), len(ok), len(lines), runs)
	}
	for id, n := range ok {
		if n != 1 {
			t.Fatalf("%s delivered %d times", id, n)
		}
	}
}

// TestPrivateWebhookRefusedAtSendTime: a job whose webhook was allowed when
// it was added (a loopback receiver) is refused at send time by a runtime
// whose NotifyAddresses allow public addresses only: the notification is
// dead, the receiver never hears of it, and the ledger says so.
func TestPrivateWebhookRefusedAtSendTime(t *testing.T) {
	rc := newReceiver(t)
	home := t.TempDir()
	first, err := Open(context.Background(), Config{Home: home, Retention: -1, NotifyAddresses: notify.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = first.AddJob(context.Background(), JobSpec{ID: "priv", Schedule: "every 1h",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}},
		Notify:  notify.Policy{Targets: []notify.Target{{Kind: notify.KindWebhook, URL: rc.srv.URL, On: []notify.Event{notify.EventSucceeded}}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rt, err := Open(context.Background(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	notifying(t, rt)
	run, err := rt.RunAndWait(context.Background(), "priv", RunOptions{})
	if err != nil || run.State != ledger.StateSucceeded {
		t.Fatalf("run %+v %v", run, err)
	}
	lines := notificationLines(t, rt, 1)
	if lines[0].State != ledger.StateDead || !strings.Contains(lines[0].Error, "not allowed") {
		t.Fatalf("line %+v, want dead: address not allowed", lines[0])
	}
	if ids, _ := rc.snapshot(); len(ids) != 0 {
		t.Fatalf("receiver got %d requests", len(ids))
	}
	dead, err := outboxOf(t, rt).List(context.Background(), notify.StateDead)
	if err != nil || len(dead) != 1 || dead[0].ID != lines[0].Notification {
		t.Fatalf("dead pile %+v %v", dead, err)
	}
}

// TestWaitingRowsHandedOverOnce plays the crashes around the hand-over: a
// row the run's write stored but no one added to the outbox, and a row
// added but not yet removed from jobs.json. Opening the home hands both
// over; each is sent exactly once.
func TestWaitingRowsHandedOverOnce(t *testing.T) {
	home := t.TempDir()
	out := filepath.Join(home, "events.jsonl")
	rt, err := Open(context.Background(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	target := notify.Target{Kind: notify.KindFile, Path: out, On: []notify.Event{notify.EventSucceeded}}
	_, _, err = rt.AddJob(context.Background(), JobSpec{ID: "w", Schedule: "every 1h",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "echo hello"}},
		Notify:  notify.Policy{Targets: []notify.Target{target}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := rt.RunAndWait(context.Background(), "w", RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The run's row went to the outbox (not sent: no notifier ran).
	handed, err := outboxOf(t, rt).Pending(context.Background())
	if err != nil || len(handed) != 1 || handed[0].Body.RunID != run.RunID || handed[0].Body.Output != "hello\n" {
		t.Fatalf("outbox %+v %v", handed, err)
	}
	if j, _ := rt.Job(context.Background(), "w"); len(j.Outbound) != 0 {
		t.Fatalf("jobs.json still holds %d rows", len(j.Outbound))
	}
	// Put it back in jobs.json (a crash before the second write), with a
	// row never handed over (a crash before Add).
	lost := handed[0].Notification
	lost.ID, lost.Body.ID, lost.Body.RunID = "ntf_lost", "ntf_lost", "r-lost"
	err = rt.Store().Update(context.Background(), func(st *store.State) error {
		st.Job("w").Outbound = []notify.Notification{handed[0].Notification, lost}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := Open(context.Background(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(context.Background())
	if j, _ := again.Job(context.Background(), "w"); len(j.Outbound) != 0 {
		t.Fatalf("open left %d rows in jobs.json", len(j.Outbound))
	}
	notifying(t, again)
	notificationLines(t, again, 2)
	events := readEvents(t, out)
	if len(events) != 2 || events[0].ID == events[1].ID {
		t.Fatalf("file got %+v, want each of the two ids once", events)
	}
}

// TestMissedSlotNotifies: a slot the misfire policy records missed owes a
// missed notification, stored in the same write.
func TestMissedSlotNotifies(t *testing.T) {
	b := setup(t)
	out := filepath.Join(b.home, "missed.jsonl")
	j := b.add(t, JobSpec{ID: "late", Schedule: "every 1h", Misfire: "skip", Grace: time.Minute,
		Notify: notify.Policy{Targets: []notify.Target{{Kind: notify.KindFile, Path: out}}}})
	slot := *j.NextRunAt
	b.clock.Set(slot.Add(30 * time.Minute))
	if res := b.fire(t, "late", slot); !res.Skipped {
		t.Fatalf("fire %+v, want skipped as missed", res)
	}
	rows, err := outboxOf(t, b.rt).Pending(context.Background())
	if err != nil || len(rows) != 1 || rows[0].Body.Event != notify.EventMissed || !rows[0].Body.Slot.Equal(slot) {
		t.Fatalf("outbox %+v %v", rows, err)
	}
	notifying(t, b.rt)
	notificationLines(t, b.rt, 1)
	if ev := readEvents(t, out); len(ev) != 1 || ev[0].Status != "missed" {
		t.Fatalf("file got %+v", ev)
	}
}

func outboxOf(t *testing.T, rt *Runtime) *notify.FileOutbox {
	t.Helper()
	box, err := rt.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	return box
}

// TestRecordMissedNotifies: a fire NAS reports dead-lettered owes a missed
// notification, handed to the outbox with the missed line.
func TestRecordMissedNotifies(t *testing.T) {
	b := setup(t)
	j := b.add(t, JobSpec{ID: "lost", Schedule: "every 1h",
		Notify: notify.Policy{Targets: []notify.Target{{Kind: notify.KindFile, Path: filepath.Join(b.home, "lost.jsonl")}}}})
	slot := *j.NextRunAt
	b.clock.Set(slot.Add(time.Minute))
	if wrote, err := b.rt.RecordMissed(context.Background(), "lost", slot, "dead-lettered"); err != nil || !wrote {
		t.Fatalf("record missed: %v %v", wrote, err)
	}
	rows, err := outboxOf(t, b.rt).Pending(context.Background())
	if err != nil || len(rows) != 1 || rows[0].Body.Event != notify.EventMissed || !strings.Contains(rows[0].Body.Error, "dead-lettered") {
		t.Fatalf("outbox %+v %v", rows, err)
	}
	if j := b.job(t, "lost"); len(j.Outbound) != 0 {
		t.Fatalf("%d rows left in jobs.json", len(j.Outbound))
	}
}

// TestShutdownInterruptionNotifies: a run stopped by Close's deadline ends
// interrupted, and its notification is in the outbox for the next agent.
func TestShutdownInterruptionNotifies(t *testing.T) {
	home := t.TempDir()
	g := newGate()
	rt, err := Open(context.Background(), Config{Home: home, Retention: -1, Runners: map[string]runner.Runner{"gate": g}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = rt.AddJob(context.Background(), JobSpec{ID: "cut", Schedule: "every 1h", Payload: runner.Payload{Kind: "gate"},
		Notify: notify.Policy{Targets: []notify.Target{{Kind: notify.KindFile, Path: filepath.Join(home, "cut.jsonl")}}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.RunNow(context.Background(), "cut", RunOptions{})
	if err != nil || res.Status != FireAccepted {
		t.Fatalf("run now: %+v %v", res, err)
	}
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := rt.Close(ctx); err == nil {
		t.Fatal("close with an ended context stopped nothing")
	}
	again, err := Open(context.Background(), Config{Home: home, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(context.Background())
	rows, err := outboxOf(t, again).Pending(context.Background())
	if err != nil || len(rows) != 1 || rows[0].Body.Event != notify.EventInterrupted || rows[0].Body.RunID != res.RunID {
		t.Fatalf("outbox %+v %v", rows, err)
	}
}

// TestRunNotifierOncePerRuntime: a second RunNotifier while one runs
// returns at once; one started after the first returned runs again; Close
// stops a running one.
func TestRunNotifierOncePerRuntime(t *testing.T) {
	b := setup(t, loopback)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- b.rt.RunNotifier(ctx) }()
	// Wait until the first holds the runtime's notifier.
	for deadline := time.Now().Add(5 * time.Second); !b.rt.notices.Running(); {
		if time.Now().After(deadline) {
			t.Fatal("the notifier never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.rt.RunNotifier(context.Background()); err != nil {
		t.Fatalf("second notifier: %v", err)
	}
	cancel()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	again := make(chan error, 1)
	go func() { again <- b.rt.RunNotifier(context.Background()) }()
	out := filepath.Join(b.home, "again.jsonl")
	b.add(t, JobSpec{ID: "again", Schedule: "every 1h", Notify: notify.Policy{Targets: []notify.Target{
		{Kind: notify.KindFile, Path: out, On: []notify.Event{notify.EventSucceeded}}}}})
	b.runOnce(t, "again", nil)
	notificationLines(t, b.rt, 1)
	if err := b.rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-again; err != nil {
		t.Fatal(err)
	}
}
