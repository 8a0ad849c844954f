package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// A fire the dispatcher dead-letters, whether the agent refused it or the
// retries ran out, becomes its job's last fire: NAS can tell the agent why
// the slot never ran and report the job as unarmed until it is armed again.
func TestDispatcherRecordsDeadLetteredFireAsLastFire(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer reply
		retry  relay.RetryPolicy
		reason string
	}{
		{"rejected", reply{status: 200, body: `{"status":"rejected","reason":"agent answered 404"}`}, relay.RetryPolicy{}, "agent answered 404"},
		{"retries spent", reply{status: 502, body: `{"error":"agent_unavailable","error_description":"agent answered 500"}`},
			relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 2, NoColdStart: true}, "gave up after 2 attempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(contract.RelayRequest, int) reply { return tc.answer }, relay.DispatcherConfig{Retry: tc.retry}, 1)
			s := b.armAt(t, "a1", "job", time.Now())
			var got []relay.UnarmedFire
			eventually(t, 5*time.Second, "the dead-lettered fire as the job's last fire", func() bool {
				var err error
				got, _, err = b.engine.Unarmed(context.Background(), relay.UnarmedQuery{Before: time.Now()})
				return err == nil && len(got) == 1
			})
			b.stop()
			f := got[0]
			if f.AgentID != "a1" || f.JobID != "job" || f.ScheduleID != s.ScheduleID || !f.FireAt.Equal(s.FireAt) ||
				f.InstanceID != "i-a1" || f.Outcome != relay.LastFireDeadLettered || !strings.Contains(f.Reason, tc.reason) {
				t.Fatalf("last fire %+v, want the dead-lettered fire of %s with reason %q", f, s.ScheduleID, tc.reason)
			}
		})
	}
}
