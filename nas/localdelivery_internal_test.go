package nas

import (
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// TestSeenSetGenerations: a delivery id is recognised as a repeat among the
// last seenCap to 2×seenCap ids, across generation changes in which the
// older generation's map is emptied and reused, and forgotten after that.
func TestSeenSetGenerations(t *testing.T) {
	t.Parallel()
	var m seenSet
	key := func(i int) deliveryKey { return deliveryKey{scheduleID: "s", token: int64(i), attempt: 1} }
	for i := range seenCap {
		if !m.first(key(i)) {
			t.Fatalf("id %d reported seen before it was", i)
		}
	}
	// Generation 1 is full; ids 0..seenCap-1 are all repeats.
	for _, i := range []int{0, seenCap / 2, seenCap - 1} {
		if m.first(key(i)) {
			t.Fatalf("id %d of the current generation not recognised", i)
		}
	}
	// Generation 2: generation 1 is still remembered.
	for i := seenCap; i < 2*seenCap; i++ {
		if !m.first(key(i)) {
			t.Fatalf("id %d reported seen before it was", i)
		}
	}
	if m.first(key(0)) || m.first(key(2*seenCap-1)) {
		t.Fatal("an id of the previous or current generation not recognised")
	}
	// Generation 3 reuses generation 1's map: its ids are forgotten, those
	// of generation 2 are remembered, and the new ones are recorded.
	if !m.first(key(2 * seenCap)) {
		t.Fatal("a new id reported seen")
	}
	if !m.first(key(1)) {
		t.Fatal("an id two generations old is still remembered")
	}
	if m.first(key(seenCap)) || m.first(key(2*seenCap)) || m.first(key(1)) {
		t.Fatal("an id of the previous or current generation not recognised after the map was reused")
	}
	if len(m.cur) != 2 || len(m.prev) != seenCap {
		t.Fatalf("generations hold %d and %d ids, want 2 and %d", len(m.cur), len(m.prev), seenCap)
	}
}

// TestOutcomeOf: each verdict ends a fire as the relay's HTTPDeliverer ends
// it from the relay route's answer to the same verdict: the same kind,
// reason, delay and cold-start and agent-down marks, and the last-fire
// record with a final verdict only.
func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	rec := lastFireOut{Record: &relay.LastFire{JobID: "j"}}
	for _, tc := range []struct {
		name string
		v    Verdict
		want relay.Outcome
	}{
		{"delivered", Verdict{Kind: VerdictDelivered}, relay.Outcome{Kind: relay.Done, Reason: "delivered", Record: rec.Record}},
		{"delivered accepted", Verdict{Kind: VerdictDelivered, AgentStatus: contract.FireAccepted}, relay.Outcome{Kind: relay.Done, Reason: "delivered: accepted", Record: rec.Record}},
		{"delivered gone", Verdict{Kind: VerdictDelivered, AgentStatus: contract.FireGone}, relay.Outcome{Kind: relay.Done, Reason: "delivered: gone", Record: rec.Record}},
		{"dropped", Verdict{Kind: VerdictDropped, Reason: "job was re-armed"}, relay.Outcome{Kind: relay.Done, Reason: "dropped: job was re-armed", Record: rec.Record}},
		{"instance stopped", Verdict{Kind: VerdictInstanceStopped}, relay.Outcome{Kind: relay.Done, Reason: "instance_stopped", Record: rec.Record}},
		{"duplicate", Verdict{Kind: VerdictDuplicate}, relay.Outcome{Kind: relay.Done, Reason: "duplicate", Record: rec.Record}},
		{"rejected", Verdict{Kind: VerdictRejected, Reason: "agent answered 404"}, relay.Outcome{Kind: relay.Dead, Reason: "rejected by the agent: agent answered 404"}},
		{"agent down", Verdict{Kind: VerdictRetry, Reason: "connection refused", AgentDown: true, RetryAfter: 2 * time.Second},
			relay.Outcome{Kind: relay.Retry, RetryAfter: 2 * time.Second, Reason: "nas answered 503: agent_unavailable: connection refused", ColdStart: true, AgentDown: true}},
		{"agent up", Verdict{Kind: VerdictRetry, Reason: "agent answered 500"},
			relay.Outcome{Kind: relay.Retry, Reason: "nas answered 502: agent_unavailable: agent answered 500"}},
		{"wild delay", Verdict{Kind: VerdictRetry, Reason: "agent answered 429", AgentDown: true, RetryAfter: 48 * time.Hour},
			relay.Outcome{Kind: relay.Retry, RetryAfter: relay.MaxRetryAfter, Reason: "nas answered 503: agent_unavailable: agent answered 429", ColdStart: true, AgentDown: true}},
		{"no verdict", Verdict{}, relay.Outcome{Kind: relay.Retry, Reason: "nas answered 502: agent_unavailable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := outcomeOf(tc.v, rec); got != tc.want {
				t.Fatalf("outcomeOf(%+v) = %+v, want %+v", tc.v, got, tc.want)
			}
		})
	}
}

// BenchmarkOutcomeOf measures the mapping of a verdict to the dispatcher's
// outcome on every in-process fire: a delivered fire's costs no allocation,
// a retried one's only its reason.
func BenchmarkOutcomeOf(b *testing.B) {
	for _, bc := range []struct {
		name string
		v    Verdict
	}{
		{"delivered", Verdict{Kind: VerdictDelivered, AgentStatus: contract.FireAccepted}},
		{"retry", Verdict{Kind: VerdictRetry, Reason: "agent answered 503", RetryAfter: time.Second, AgentDown: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if out := outcomeOf(bc.v, lastFireOut{}); out.Kind == 0 {
					b.Fatal("no outcome")
				}
			}
		})
	}
}
