package notify

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Notifier and outbox time source moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// After never fires: tests drive the fake clock through Drain.
func (c *fakeClock) After(time.Duration) <-chan time.Time { return make(chan time.Time) }

// observed collects the attempts a Notifier records.
type observed struct {
	mu       sync.Mutex
	attempts []Attempt
}

func (o *observed) add(_ Row, a Attempt) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, a)
}

func (o *observed) states() []State {
	o.mu.Lock()
	defer o.mu.Unlock()
	var s []State
	for _, a := range o.attempts {
		s = append(s, a.State)
	}
	return s
}

type rig struct {
	clock  *fakeClock
	box    *FileOutbox
	secret Secret
	obs    *observed
	n      *Notifier
}

func newRig(t *testing.T, opts Options) *rig {
	t.Helper()
	r := &rig{clock: newFakeClock(), secret: NewSecret(), obs: &observed{}}
	box, err := OpenFileOutbox(t.TempDir(), FileOptions{Now: r.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	r.box = box
	opts.Clock, opts.Observe = r.clock, r.obs.add
	if opts.Owner == "" {
		opts.Owner = "test"
	}
	r.n = New(box, Senders{Webhook: loopbackSender(r.secret, r.clock.Now), File: FileSender{}}, opts)
	return r
}

func (r *rig) add(t *testing.T, ns ...Notification) {
	t.Helper()
	for i := range ns {
		ns[i].CreatedAt = r.clock.Now()
	}
	if _, err := r.box.Add(context.Background(), ns...); err != nil {
		t.Fatal(err)
	}
}

func (r *rig) row(t *testing.T, id string) Row {
	t.Helper()
	row, err := r.box.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// The case: a receiver that answers 503 three times and then 200
// gets the same webhook-id every time, and the notification is recorded
// sent once.
func TestNotifierRetriesUntilSent(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 503, 503, 503, 200)
	r := newRig(t, Options{Backoff: time.Second, MaxBackoff: time.Minute})
	r.add(t, sample("ntf_retry", Target{Kind: KindWebhook, URL: rcv.srv.URL}))
	ctx := context.Background()
	for range 4 {
		next, err := r.n.Drain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !next.IsZero() {
			r.clock.Set(next)
		}
	}
	if next, err := r.n.Drain(ctx); err != nil || !next.IsZero() {
		t.Fatalf("after sending: next %v, err %v", next, err)
	}
	got := rcv.deliveries()
	if len(got) != 4 {
		t.Fatalf("%d deliveries, want 4", len(got))
	}
	for i, d := range got {
		if d.header.Get("webhook-id") != "ntf_retry" || d.header.Get("Idempotency-Key") != "ntf_retry" {
			t.Fatalf("delivery %d: headers %v", i, d.header)
		}
		if err := verifyStandardWebhook(r.secret.String(), d.header, d.body, r.clock.Now()); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
		if string(d.body) != string(got[0].body) {
			t.Fatalf("delivery %d carries a different body", i)
		}
	}
	want := []State{StatePending, StatePending, StatePending, StateSent}
	if s := r.obs.states(); strings.Join(statesText(s), ",") != strings.Join(statesText(want), ",") {
		t.Fatalf("recorded %v, want %v", s, want)
	}
	row := r.row(t, "ntf_retry")
	if row.State != StateSent || row.Attempts != 4 || row.FinishedAt.IsZero() || row.LastError != "" {
		t.Fatalf("row %+v", row)
	}
	log, _ := os.ReadFile(r.box.Path())
	if c := strings.Count(string(log), `"state":"sent"`); c != 1 {
		t.Fatalf("%d sent lines in the outbox, want 1", c)
	}
}

func statesText(s []State) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = string(x)
	}
	return out
}

func TestNotifierHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 429, 200)
	rcv.headers.Set("Retry-After", "120")
	r := newRig(t, Options{Backoff: time.Second})
	r.add(t, sample("ntf_ra", Target{Kind: KindWebhook, URL: rcv.srv.URL}))
	ctx := context.Background()
	t0 := r.clock.Now()
	next, err := r.n.Drain(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !next.Equal(t0.Add(120*time.Second)) || !r.row(t, "ntf_ra").NextAt.Equal(next) {
		t.Fatalf("next attempt at %v, want %v (Retry-After)", next, t0.Add(120*time.Second))
	}
	r.clock.Set(t0.Add(119 * time.Second))
	if again, _ := r.n.Drain(ctx); !again.Equal(next) || len(rcv.deliveries()) != 1 {
		t.Fatalf("sent before Retry-After: %d deliveries", len(rcv.deliveries()))
	}
	r.clock.Set(next)
	if _, err := r.n.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if len(rcv.deliveries()) != 2 || r.row(t, "ntf_ra").State != StateSent {
		t.Fatalf("%d deliveries, row %+v", len(rcv.deliveries()), r.row(t, "ntf_ra"))
	}
}

func TestNotifierBackoff(t *testing.T) {
	t.Parallel()
	n := New(nil, nil, Options{Backoff: time.Second, MaxBackoff: 30 * time.Second})
	for k := 1; k <= 12; k++ {
		full := min(time.Second<<(k-1), 30*time.Second)
		for range 50 {
			if d := n.backoff(k); d < full/2 || d > full {
				t.Fatalf("attempt %d: %s outside [%s, %s]", k, d, full/2, full)
			}
		}
	}
	seen := map[time.Duration]bool{}
	for range 50 {
		seen[n.backoff(5)] = true
	}
	if len(seen) < 2 {
		t.Fatal("no jitter")
	}
}

// A notification that keeps failing goes dead at the give-up time, stays
// visible, and a replay delivers it under the same id.
func TestNotifierGivesUpThenReplay(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 503)
	r := newRig(t, Options{Backoff: 4 * time.Second, MaxBackoff: 4 * time.Second, GiveUp: 30 * time.Second})
	r.add(t, sample("ntf_dead", Target{Kind: KindWebhook, URL: rcv.srv.URL}))
	ctx := context.Background()
	for range 20 {
		next, err := r.n.Drain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if next.IsZero() {
			break
		}
		r.clock.Set(next)
	}
	row := r.row(t, "ntf_dead")
	if row.State != StateDead || !strings.Contains(row.LastError, "gave up") || row.LastStatus != 503 {
		t.Fatalf("row %+v", row)
	}
	if !r.clock.Now().Before(row.CreatedAt.Add(30 * time.Second)) {
		t.Fatalf("retried until %v, past the give-up time", r.clock.Now())
	}
	dead, _ := r.box.List(ctx, StateDead)
	if len(dead) != 1 || dead[0].ID != "ntf_dead" {
		t.Fatalf("dead pile %v", dead)
	}
	tries := len(rcv.deliveries())
	rcv.mu.Lock()
	rcv.answers = []int{200}
	rcv.got = nil
	rcv.mu.Unlock()
	if _, err := r.box.Replay(ctx, "ntf_dead"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.n.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	got := rcv.deliveries()
	if len(got) != 1 || got[0].header.Get("webhook-id") != "ntf_dead" || r.row(t, "ntf_dead").State != StateSent {
		t.Fatalf("after replay: %d deliveries (%d before), row %+v", len(got), tries, r.row(t, "ntf_dead"))
	}
}

func TestNotifierDeadOnClientError(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 404)
	r := newRig(t, Options{})
	r.add(t, sample("ntf_404", Target{Kind: KindWebhook, URL: rcv.srv.URL}))
	if next, err := r.n.Drain(context.Background()); err != nil || !next.IsZero() {
		t.Fatalf("next %v err %v", next, err)
	}
	if row := r.row(t, "ntf_404"); row.State != StateDead || row.Attempts != 1 || row.LastStatus != 404 {
		t.Fatalf("row %+v", row)
	}
}

// A sender that dies after the target took a notification but before
// recording it: once its lease runs out another sender delivers the same
// id exactly once more, and the dead sender's late record is refused.
func TestNotifierResendsAfterExpiredClaim(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	r := newRig(t, Options{Lease: time.Minute})
	n := sample("ntf_crash", Target{Kind: KindWebhook, URL: rcv.srv.URL})
	r.add(t, n)
	ctx := context.Background()
	crashed, err := r.box.Claim(ctx, n.ID, "crashed", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res := loopbackSender(r.secret, r.clock.Now).Send(ctx, crashed.Notification); res.Outcome != OutcomeSent {
		t.Fatalf("first send %+v", res)
	}
	next, err := r.n.Drain(ctx)
	if err != nil || !next.Equal(crashed.LeaseUntil) || len(rcv.deliveries()) != 1 {
		t.Fatalf("under a live lease: next %v err %v, %d deliveries", next, err, len(rcv.deliveries()))
	}
	r.clock.Set(crashed.LeaseUntil)
	for range 3 {
		if _, err := r.n.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := rcv.deliveries()
	if len(got) != 2 || got[1].header.Get("webhook-id") != n.ID {
		t.Fatalf("%d deliveries, want 2 with id %s", len(got), n.ID)
	}
	if err := r.box.Done(ctx, crashed, Attempt{State: StateSent}); !errors.Is(err, ErrStaleClaim) {
		t.Fatalf("late record of the expired claim: %v", err)
	}
	if row := r.row(t, n.ID); row.State != StateSent || row.Attempts != 1 || row.Token != 2 {
		t.Fatalf("row %+v", row)
	}
}

// Run resumes what is already owed without being woken, and delivers a
// new row when woken.
func TestNotifierRunResumesAndWakes(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	box, err := OpenFileOutbox(t.TempDir(), FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	ctx, cancel := context.WithCancel(context.Background())
	if _, err := box.Add(ctx, sample("ntf_old", Target{Kind: KindWebhook, URL: rcv.srv.URL})); err != nil {
		t.Fatal(err)
	}
	n := New(box, Senders{Webhook: loopbackSender(NewSecret(), time.Now)}, Options{Poll: time.Hour})
	done := make(chan error)
	go func() { done <- n.Run(ctx) }()
	waitDelivery(t, rcv)
	if _, err := box.Add(ctx, sample("ntf_new", Target{Kind: KindWebhook, URL: rcv.srv.URL})); err != nil {
		t.Fatal(err)
	}
	n.Wake()
	waitDelivery(t, rcv)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := rcv.deliveries()
	if got[0].header.Get("webhook-id") != "ntf_old" || got[1].header.Get("webhook-id") != "ntf_new" {
		t.Fatalf("deliveries %v, %v", got[0].header, got[1].header)
	}
}

func waitDelivery(t *testing.T, rcv *receiver) {
	t.Helper()
	select {
	case <-rcv.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
	}
}

// Two notifiers draining one home at once send each notification exactly
// once, whether they open the outbox each (as two processes do) or share
// one handle (two goroutines of one agent).
func TestTwoNotifiersOneHome(t *testing.T) {
	t.Parallel()
	for _, shared := range []string{"own outbox each", "one shared outbox"} {
		t.Run(shared, func(t *testing.T) {
			t.Parallel()
			twoNotifiers(t, shared == "one shared outbox")
		})
	}
}

func twoNotifiers(t *testing.T, share bool) {
	rcv := newReceiver(t, 200)
	dir := t.TempDir()
	const count = 40
	var ns []Notification
	for i := range count {
		ns = append(ns, sample("ntf_"+string(rune('A'+i)), Target{Kind: KindWebhook, URL: rcv.srv.URL}))
	}
	first, err := OpenFileOutbox(dir, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	var wg sync.WaitGroup
	for w := range 2 {
		box := first
		if w == 1 && !share {
			if box, err = OpenFileOutbox(dir, FileOptions{}); err != nil {
				t.Fatal(err)
			}
			defer box.Close()
		}
		if _, err := box.Add(context.Background(), ns...); err != nil {
			t.Fatal(err)
		}
		n := New(box, Senders{Webhook: loopbackSender(NewSecret(), time.Now)}, Options{Owner: "replica-" + string(rune('0'+w))})
		wg.Go(func() {
			for range 5 {
				if _, err := n.Drain(context.Background()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]int{}
	for _, d := range rcv.deliveries() {
		seen[d.header.Get("webhook-id")]++
	}
	if len(seen) != count {
		t.Fatalf("%d distinct ids delivered, want %d", len(seen), count)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
}
