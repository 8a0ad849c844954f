package relaytest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// ids makes schedule ids unique within the process.
var ids atomic.Int64

// newID returns a fresh schedule id.
func newID() string { return fmt.Sprintf("sch-%d", ids.Add(1)) }

// now is the real time, whole milliseconds, so times survive engines that
// store milliseconds unchanged.
func now() time.Time { return time.Now().Truncate(time.Millisecond) }

// ctxT returns a context that ends with the test.
func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// noErr fails the test now if err is not nil.
func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", what, err)
	}
}

// isErr fails the test now unless err wraps want.
func isErr(t *testing.T, err, want error, what string) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: error %v, want %v", what, err, want)
	}
}

// equal fails the test now unless got == want.
func equal[T comparable](t *testing.T, got, want T, what string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// sameTime fails the test now unless got and want are the same instant.
func sameTime(t *testing.T, got, want time.Time, what string) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s = %s, want %s", what, got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
}

// eventually polls cond every few milliseconds until it holds, failing the
// test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// arm arms job of agent at fireAt with a fresh schedule id.
func arm(t *testing.T, e relay.Engine, agent, job string, fireAt time.Time) relay.ArmResult {
	t.Helper()
	res, err := e.Arm(ctxT(t), relay.ArmRequest{
		AgentID:     agent,
		InstanceID:  "inst-" + agent,
		JobID:       job,
		FireAt:      fireAt,
		CallbackURL: "https://" + agent + ".example/cb",
		ScheduleID:  newID(),
	})
	noErr(t, err, "arm "+agent+"/"+job)
	return res
}

// claim claims up to max with a lease of leaseFor.
func claim(t *testing.T, e relay.Engine, max int, leaseFor time.Duration) []relay.Lease {
	t.Helper()
	ls, err := e.Claim(ctxT(t), max, leaseFor, relay.Flow{})
	noErr(t, err, "claim")
	return ls
}

// claimOne claims exactly one lease and fails otherwise.
func claimOne(t *testing.T, e relay.Engine, leaseFor time.Duration) relay.Lease {
	t.Helper()
	ls := claim(t, e, 10, leaseFor)
	if len(ls) != 1 {
		t.Fatalf("claim: got %d leases, want 1", len(ls))
	}
	return ls[0]
}

// claimEventually polls Claim until it returns one lease.
func claimEventually(t *testing.T, e relay.Engine, leaseFor, timeout time.Duration) (relay.Lease, time.Time) {
	t.Helper()
	var l relay.Lease
	var at time.Time
	eventually(t, timeout, "claim", func() bool {
		ls := claim(t, e, 1, leaseFor)
		at = time.Now()
		if len(ls) == 1 {
			l = ls[0]
			return true
		}
		return false
	})
	return l, at
}

// stats reads the engine's stats.
func stats(t *testing.T, e relay.Engine) relay.Stats {
	t.Helper()
	s, err := e.Stats(ctxT(t))
	noErr(t, err, "stats")
	return s
}

// lost checks that every fenced call with l fails with relay.ErrLeaseLost.
func lost(t *testing.T, e relay.Engine, l relay.Lease) {
	t.Helper()
	ctx := ctxT(t)
	_, err := e.Extend(ctx, l, time.Minute)
	isErr(t, err, relay.ErrLeaseLost, "extend with a stale token")
	isErr(t, e.Ack(ctx, l), relay.ErrLeaseLost, "ack with a stale token")
	isErr(t, e.Nack(ctx, l, 0, "stale"), relay.ErrLeaseLost, "nack with a stale token")
	isErr(t, e.Kill(ctx, l, "stale"), relay.ErrLeaseLost, "kill with a stale token")
}

// listAll pages every one-shot of agent with the given page size.
func listAll(t *testing.T, e relay.Engine, agent string, limit int) (jobs []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		items, next, err := e.List(ctxT(t), agent, cursor, limit)
		noErr(t, err, "list")
		if len(items) > limit {
			t.Fatalf("list: page of %d over limit %d", len(items), limit)
		}
		pages++
		for _, it := range items {
			if it.AgentID != agent {
				t.Fatalf("list of %s returned a one-shot of %s", agent, it.AgentID)
			}
			jobs = append(jobs, it.JobID)
		}
		if next == "" {
			return jobs, pages
		}
		if len(items) == 0 {
			t.Fatalf("list: empty page with a next cursor")
		}
		if pages > 1000 {
			t.Fatalf("list: cursor never ends")
		}
		cursor = next
	}
}

// deadAll pages the dead letter (of agent, or all when "") with limit.
func deadAll(t *testing.T, e relay.Engine, agent string, limit int) (items []relay.DeadLetter, pages int) {
	t.Helper()
	cursor := ""
	for {
		page, next, err := e.ListDead(ctxT(t), agent, cursor, limit)
		noErr(t, err, "list dead")
		if len(page) > limit {
			t.Fatalf("list dead: page of %d over limit %d", len(page), limit)
		}
		pages++
		items = append(items, page...)
		if next == "" {
			return items, pages
		}
		if len(page) == 0 {
			t.Fatalf("list dead: empty page with a next cursor")
		}
		if pages > 1000 {
			t.Fatalf("list dead: cursor never ends")
		}
		cursor = next
	}
}
