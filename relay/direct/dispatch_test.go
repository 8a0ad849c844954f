package direct_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/chronoscron/chronos/relay/direct"
	"github.com/chronoscron/chronos/relay/memory"
)

// TestDispatcherDeliversDirectFires runs a dispatcher on the memory engine
// with Route in front of a mediated deliverer: direct fires reach their
// agent signed under their own keys and are acked with their last-fire
// record, a waking agent's fire is held and retried until it is taken, a
// fire whose key does not open is dead-lettered (and recorded as the job's
// last fire), and mediated fires still go the mediated way. Neither the
// dispatcher's logs nor the store's reasons show a key.
func TestDispatcherDeliversDirectFires(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	s := newSealer(t)
	const jobs = 20
	keys := make([]cronkey.Key, jobs)
	var waking atomic.Int32
	agents := make([]*agent, jobs)
	at := time.Now().Add(200 * time.Millisecond)
	for i := range jobs {
		keys[i], _ = cronkey.Mint()
		agents[i] = newAgent(t, keys[i])
		job := fmt.Sprintf("job-%d", i)
		sealed, err := s.Seal("agent-a", job, keys[i])
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			sealed, _ = s.Seal("agent-a", "job-other", keys[i]) // does not open for job-1
		}
		if i == 2 {
			agents[i].answer = func(w http.ResponseWriter) {
				if waking.Add(1) == 1 {
					answerWith(503, "0", `{"error":"waking"}`)(w)
					return
				}
				answerWith(202, "", `{"status":"accepted"}`)(w)
			}
		}
		_, err = eng.Arm(ctx, relay.ArmRequest{
			AgentID: "agent-a", InstanceID: "inst-1", JobID: job, FireAt: at, CallbackURL: agents[i].srv.URL,
			ScheduleID: fmt.Sprintf("sch-%d", i), Direct: relay.DirectKey{Sealed: sealed, KeyID: keys[i].ID, MintedAt: time.Now()},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := eng.Arm(ctx, relay.ArmRequest{AgentID: "agent-b", InstanceID: "inst-b", JobID: "mediated", FireAt: at, CallbackURL: "http://127.0.0.1:1", ScheduleID: "sch-m"})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var mediated atomic.Int32
	d := direct.Route(newDeliverer(t, s, log), relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		mediated.Add(1)
		return relay.Outcome{Kind: relay.Done, Reason: "mediated"}
	}))
	disp := relay.NewDispatcher(eng, d, relay.DispatcherConfig{Logger: log, Retry: relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}, Recheck: 50 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- disp.Run(runCtx) }()
	for {
		st, err := eng.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Armed == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("fires left: %+v\n%s", st, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, a := range agents {
		want := int32(1)
		switch i {
		case 1:
			want = 0
		case 2:
			want = 2
		}
		if n := a.calls.Load(); n != want {
			t.Errorf("agent of job-%d called %d times, want %d", i, n, want)
		}
	}
	if mediated.Load() != 1 {
		t.Errorf("the mediated fire went %d times the mediated way", mediated.Load())
	}
	dead, _, err := eng.ListDead(ctx, "agent-a", "", 10)
	if err != nil || len(dead) != 1 || dead[0].JobID != "job-1" || !strings.Contains(dead[0].Reason, "does not open") {
		t.Fatalf("dead letters %+v, %v; want job-1's, its key not opening", dead, err)
	}
	last, err := eng.LastFiresOf(ctx, "agent-a", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]string{}
	text := []string{logs.String(), dead[0].Reason}
	for _, f := range last {
		outcomes[f.JobID] = f.Outcome
		text = append(text, f.Reason)
	}
	if len(last) != jobs || outcomes["job-0"] != relay.LastFireDelivered || outcomes["job-2"] != relay.LastFireDelivered || outcomes["job-1"] != relay.LastFireDeadLettered {
		t.Fatalf("last fires %v", outcomes)
	}
	all := strings.Join(text, "\n")
	for _, k := range keys {
		for _, secret := range secretForms(k, "") {
			if strings.Contains(all, secret) {
				t.Fatalf("a key shows (as %q) in the logs or reasons", secret)
			}
		}
	}
	if !strings.Contains(all, contract.RelayDelivered) {
		t.Fatalf("no delivery logged:\n%s", all)
	}
}
