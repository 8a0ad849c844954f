package nas_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// acceptingCaller answers every fire as accepted without a network call.
type acceptingCaller struct{}

func (acceptingCaller) Fire(context.Context, string, string, []byte) agentcall.FireResult {
	return agentcall.FireResult{Outcome: agentcall.OutcomeDelivered, HTTPStatus: 202, AgentStatus: contract.FireAccepted}
}

// TestLocalDelivererClaimFreshnessByServiceClock: whether a lease's claim
// is fresh enough to stand for the armed row is judged by the service's
// clock, not the wall clock. The lease carries a row the store no longer
// holds: a claim fresh by the service's clock delivers it as claimed, one
// older than a second by it reads the store and drops the fire.
func TestLocalDelivererClaimFreshnessByServiceClock(t *testing.T) {
	t.Parallel()
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC) // far from the wall clock
	for _, tc := range []struct {
		name      string
		claimedAt time.Time
		kind      relay.OutcomeKind
		reason    string
	}{
		{"fresh", now.Add(-100 * time.Millisecond), relay.Done, "delivered: accepted"},
		{"stale", now.Add(-2 * time.Second), relay.Done, "dropped: job is no longer armed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eng := memory.New(memory.Options{})
			t.Cleanup(func() { _ = eng.Close() })
			ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
			if err != nil {
				t.Fatal(err)
			}
			agents, _ := nas.NewStaticAgents(nil)
			svc, err := nas.New(nas.Options{
				Config: nas.Config{PublicURL: "https://nas.example.com", Relay: nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))}}},
				Engine: eng, Verifier: agents, Keys: ring, Logger: slog.New(slog.DiscardHandler),
				Now: func() time.Time { return now }, Caller: acceptingCaller{},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(svc.Close)
			lease := relay.Lease{
				OneShot: relay.OneShot{AgentID: "a", InstanceID: "i", JobID: "j", ScheduleID: "s-1", FireAt: now, CallbackURL: "https://agent.example.com"},
				Token:   1, ClaimedAt: tc.claimedAt,
			}
			lease.Attempt = 1
			out := svc.LocalDeliverer().Deliver(context.Background(), lease)
			if out.Kind != tc.kind || out.Reason != tc.reason {
				t.Fatalf("outcome %+v, want %s %q", out, tc.kind, tc.reason)
			}
		})
	}
}
