package backoff

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

const ms = time.Millisecond

// top pins a draw to the highest value, bottom to the lowest.
func top(n int64) int64    { return n - 1 }
func bottom(int64) int64   { return 0 }
func middle(n int64) int64 { return n / 2 }

func TestCeiling(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		base, max time.Duration
		steps     []time.Duration // ceilings of steps 1, 2, ...
	}{
		{"doubles up to the cap", 50 * ms, 5 * time.Second,
			[]time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}},
		{"relay ladder defaults", time.Second, 5 * time.Minute,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 5 * time.Minute}},
		{"cap equal to base", time.Second, time.Second, []time.Duration{time.Second, time.Second, time.Second}},
		{"cap below base is base", time.Second, ms, []time.Duration{time.Second, time.Second}},
		{"cap not a power of two of base", 3 * ms, 10 * ms, []time.Duration{3 * ms, 6 * ms, 10 * ms, 10 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := Policy{Base: tc.base, Max: tc.max}
			for i, want := range tc.steps {
				if got := p.Ceiling(i + 1); got != want {
					t.Errorf("step %d: ceiling %s, want %s", i+1, got, want)
				}
				if got := p.Delay(i + 1); got != want {
					t.Errorf("step %d without jitter: delay %s, want the ceiling %s", i+1, got, want)
				}
			}
		})
	}
}

func TestCeilingSaturates(t *testing.T) {
	t.Parallel()
	p := Policy{Base: time.Nanosecond, Max: time.Duration(math.MaxInt64)}
	for _, n := range []int{0, 1, 62, 63, 64, 1000, math.MaxInt32} {
		c := p.Ceiling(n)
		if c <= 0 || c > p.Max {
			t.Fatalf("step %d: ceiling %d, want in (0, max]", n, c)
		}
	}
	if c := p.Ceiling(0); c != time.Nanosecond {
		t.Fatalf("step 0 counts as step 1: ceiling %s", c)
	}
}

func TestDelayJitter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		jitter Jitter
		step   int
		rnd    func(int64) int64
		want   time.Duration
	}{
		{"above base, lowest draw", JitterAboveBase, 3, bottom, 100 * ms},
		{"above base, highest draw", JitterAboveBase, 3, top, 400 * ms},
		{"above base, first step has no spread", JitterAboveBase, 1, top, 100 * ms},
		{"above base, capped step", JitterAboveBase, 10, top, time.Second},
		{"upper half, lowest draw", JitterUpperHalf, 3, bottom, 200 * ms},
		{"upper half, highest draw", JitterUpperHalf, 3, top, 400 * ms},
		{"upper half, first step", JitterUpperHalf, 1, bottom, 50 * ms},
		{"upper half, middle draw", JitterUpperHalf, 2, middle, 150 * ms},
		{"no jitter ignores the draw", NoJitter, 2, bottom, 200 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := Policy{Base: 100 * ms, Max: time.Second, Jitter: tc.jitter, Rand: tc.rnd}
			if got := p.Delay(tc.step); got != tc.want {
				t.Fatalf("delay of step %d = %s, want %s", tc.step, got, tc.want)
			}
		})
	}
}

// TestDelayJitterBounds draws many delays from the real random source: each
// stays within its step's bounds, and the draws spread over the range.
func TestDelayJitterBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		jitter Jitter
		lo     func(c time.Duration) time.Duration
	}{
		{JitterAboveBase, func(time.Duration) time.Duration { return 100 * ms }},
		{JitterUpperHalf, func(c time.Duration) time.Duration { return c / 2 }},
	} {
		p := Policy{Base: 100 * ms, Max: 2 * time.Second, Jitter: tc.jitter}
		for step := 1; step <= 8; step++ {
			c := p.Ceiling(step)
			lo := tc.lo(c)
			seenLow, seenHigh := false, false
			for range 2000 {
				d := p.Delay(step)
				if d < lo || d > c {
					t.Fatalf("jitter %d step %d: delay %s outside [%s, %s]", tc.jitter, step, d, lo, c)
				}
				seenLow = seenLow || d < lo+(c-lo)/4
				seenHigh = seenHigh || d > c-(c-lo)/4
			}
			if c > lo && (!seenLow || !seenHigh) {
				t.Fatalf("jitter %d step %d: 2000 draws never reached both ends of [%s, %s]", tc.jitter, step, lo, c)
			}
		}
	}
}

func TestBetween(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		lo, hi time.Duration
		rnd    func(int64) int64
		want   time.Duration
	}{
		{"lowest", 10 * ms, 20 * ms, bottom, 10 * ms},
		{"highest is inclusive", 10 * ms, 20 * ms, top, 20 * ms},
		{"empty range", 10 * ms, 10 * ms, top, 10 * ms},
		{"inverted range", 10 * ms, 5 * ms, top, 10 * ms},
		{"a fifth above", 250 * ms, 300 * ms, top, 300 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Between(tc.lo, tc.hi, tc.rnd); got != tc.want {
				t.Fatalf("Between(%s, %s) = %s, want %s", tc.lo, tc.hi, got, tc.want)
			}
		})
	}
	for range 1000 {
		if d := Between(ms, 2*ms, nil); d < ms || d > 2*ms {
			t.Fatalf("Between with the default source = %s, outside [1ms, 2ms]", d)
		}
	}
}

func TestSleep(t *testing.T) {
	t.Parallel()
	if err := Sleep(context.Background(), ms); err != nil {
		t.Fatalf("sleep = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("sleep on an ended context = %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("zero sleep on an ended context = %v, want context.Canceled", err)
	}
	if since := time.Since(start); since > time.Second {
		t.Fatalf("sleep on an ended context took %s", since)
	}
}

// TestSleepStopsWhenContextEnds cancels a long sleep from another goroutine
// once it has started.
func TestSleepStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Sleep(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("sleep = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sleep did not end with its context")
	}
}

var errBoom = errors.New("boom")

// failing returns an op that fails n times with err, then succeeds, and the
// attempt numbers it saw.
func failing(n int, err func(attempt int) error) (func(context.Context, int) error, *[]int) {
	var seen []int
	return func(_ context.Context, attempt int) error {
		seen = append(seen, attempt)
		if len(seen) <= n {
			return err(attempt)
		}
		return nil
	}, &seen
}

func TestRetrierDo(t *testing.T) {
	t.Parallel()
	plain := func(int) error { return errBoom }
	for _, tc := range []struct {
		name        string
		r           Retrier
		fails       int
		err         func(attempt int) error
		wantErr     error
		wantCalls   int
		wantWaits   []time.Duration
		ctxDeadline time.Duration
	}{
		{name: "first try", r: Retrier{Policy: Policy{Base: ms}}, fails: 0, err: plain, wantCalls: 1},
		{name: "retries on the schedule", r: Retrier{Policy: Policy{Base: ms, Max: 4 * ms}},
			fails: 4, err: plain, wantCalls: 5, wantWaits: []time.Duration{ms, 2 * ms, 4 * ms, 4 * ms}},
		{name: "attempts spent", r: Retrier{Policy: Policy{Base: ms, Max: time.Second}, MaxAttempts: 3},
			fails: 10, err: plain, wantErr: errBoom, wantCalls: 3, wantWaits: []time.Duration{ms, 2 * ms}},
		{name: "permanent stops at once", r: Retrier{Policy: Policy{Base: ms}},
			fails: 10, err: func(int) error { return Permanent(errBoom) }, wantErr: errBoom, wantCalls: 1},
		{name: "retry-after replaces the delay", r: Retrier{Policy: Policy{Base: 5 * ms, Max: 5 * ms}},
			fails: 2, err: func(a int) error { return After(errBoom, time.Duration(a)*ms) }, wantCalls: 3,
			wantWaits: []time.Duration{ms, 2 * ms}},
		{name: "zero retry-after keeps the delay", r: Retrier{Policy: Policy{Base: 3 * ms}},
			fails: 1, err: func(int) error { return After(errBoom, 0) }, wantCalls: 2, wantWaits: []time.Duration{3 * ms}},
		{name: "retry-after beyond MaxWait gives up", r: Retrier{Policy: Policy{Base: ms}, MaxWait: time.Second},
			fails: 10, err: func(int) error { return After(errBoom, time.Minute) }, wantErr: errBoom, wantCalls: 1},
		{name: "deadline before the next attempt gives up", r: Retrier{Policy: Policy{Base: time.Minute}},
			fails: 10, err: plain, wantErr: errBoom, wantCalls: 1, ctxDeadline: 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.ctxDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxDeadline)
				defer cancel()
			}
			var waits []time.Duration
			tc.r.OnRetry = func(attempt int, wait time.Duration, err error) {
				if attempt != len(waits)+1 || !errors.Is(err, errBoom) {
					t.Errorf("OnRetry(%d, %s, %v) after %d waits", attempt, wait, err, len(waits))
				}
				waits = append(waits, wait)
			}
			op, seen := failing(tc.fails, tc.err)
			err := tc.r.Do(ctx, op)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && err != tc.wantErr {
				t.Fatalf("Do = %v (%T), want %v unwrapped", err, err, tc.wantErr)
			}
			if len(*seen) != tc.wantCalls {
				t.Fatalf("%d calls, want %d", len(*seen), tc.wantCalls)
			}
			for i, a := range *seen {
				if a != i+1 {
					t.Fatalf("attempt numbers %v", *seen)
				}
			}
			if len(waits) != len(tc.wantWaits) {
				t.Fatalf("waits %v, want %v", waits, tc.wantWaits)
			}
			for i := range waits {
				if waits[i] != tc.wantWaits[i] {
					t.Fatalf("waits %v, want %v", waits, tc.wantWaits)
				}
			}
		})
	}
}

// TestRetrierDoStopsWhenContextEnds ends the context during a long wait: Do
// returns at once with both the context's error and the last failure.
func TestRetrierDoStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan struct{})
	done := make(chan error, 1)
	r := Retrier{
		Policy:  Policy{Base: time.Hour},
		OnRetry: func(int, time.Duration, error) { close(waiting) },
	}
	calls := 0
	go func() {
		done <- r.Do(ctx, func(context.Context, int) error { calls++; return errBoom })
	}()
	<-waiting
	cancel()
	select {
	case err := <-done:
		var stopped *StoppedError
		if !errors.As(err, &stopped) || !errors.Is(err, context.Canceled) || !errors.Is(err, errBoom) ||
			err.Error() != "context canceled (last error: boom)" {
			t.Fatalf("Do = %v, want context.Canceled wrapping the last error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Do did not stop when its context ended")
	}
	if calls != 1 {
		t.Fatalf("%d calls, want 1", calls)
	}
}

// TestRetrierDoPassesContext gives op the context Do was called with.
func TestRetrierDoPassesContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, "v")
	err := Retrier{Policy: Policy{Base: ms}}.Do(ctx, func(c context.Context, _ int) error {
		if c.Value(key{}) != "v" {
			return Permanent(errors.New("op got another context"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestControlErrors(t *testing.T) {
	t.Parallel()
	if Permanent(nil) != nil || After(nil, time.Second) != nil {
		t.Fatal("a nil error must stay nil")
	}
	for _, err := range []error{Permanent(errBoom), After(errBoom, time.Second)} {
		if !errors.Is(err, errBoom) || err.Error() != "boom" {
			t.Fatalf("%v does not read and unwrap as the error it marks", err)
		}
	}
}

// TestDelayDefaultSource draws with no Rand set.
func TestDelayDefaultSource(t *testing.T) {
	t.Parallel()
	p := Policy{Base: ms, Max: 8 * ms, Jitter: JitterAboveBase}
	for range 100 {
		n := 1 + rand.IntN(6)
		if d := p.Delay(n); d < ms || d > p.Ceiling(n) {
			t.Fatalf("step %d: delay %s outside [1ms, %s]", n, d, p.Ceiling(n))
		}
	}
}
