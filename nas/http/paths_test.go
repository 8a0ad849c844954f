package nashttp_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

// twoPaths is one NAS with both ways a dispatcher hands it a fire: the
// signed relay route over loopback, and in process.
type twoPaths struct {
	engine relay.Engine
	agent  *fakeAgent
	paths  map[string]relay.Deliverer
}

// startTwoPaths serves NAS's relay route on engine and builds both
// deliverers.
func startTwoPaths(t *testing.T, engine relay.Engine) *twoPaths {
	t.Helper()
	n := serveRelayRoute(t, engine, nas.RetryConfig{})
	return &twoPaths{engine: engine, agent: newFakeAgent(t, n.svc.JWKS()),
		paths: map[string]relay.Deliverer{"route": n.route, "in-process": n.svc.LocalDeliverer()}}
}

// lease arms job for agent A, due now, and claims it.
func (p *twoPaths) lease(t *testing.T, job string) relay.Lease {
	t.Helper()
	ctx := context.Background()
	if _, err := p.engine.Arm(ctx, relay.ArmRequest{AgentID: agentA, InstanceID: instanceA, JobID: job,
		FireAt: time.Now().Add(-time.Millisecond), CallbackURL: p.agent.URL(), ScheduleID: "sch-" + job}); err != nil {
		t.Fatal(err)
	}
	var got relay.Lease
	eventually(t, 5*time.Second, func() bool {
		ls, err := p.engine.Claim(ctx, 100, time.Minute, relay.Flow{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if l.JobID != job {
				t.Fatalf("claimed %s, want only %s", l.JobID, job)
			}
			got = l
		}
		return len(ls) > 0
	})
	return got
}

// deliver delivers l on path and, as a dispatcher does, writes the
// outcome's last-fire record when the deliverer hands one over.
func (p *twoPaths) deliver(t *testing.T, path string, l relay.Lease) relay.Outcome {
	t.Helper()
	out := p.paths[path].Deliver(context.Background(), l)
	if out.Record != nil {
		if path == "route" {
			t.Fatal("the relay route's deliverer handed over a record; NAS writes it itself there")
		}
		if err := p.engine.RecordLastFire(context.Background(), *out.Record); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// lastFire returns job's last-fire outcome, "" for none.
func (p *twoPaths) lastFire(t *testing.T, job string) string {
	t.Helper()
	fires, err := p.engine.LastFiresOf(context.Background(), agentA, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fires {
		if f.JobID == job {
			return f.Outcome
		}
	}
	return ""
}

// pathScenario is one situation a fire meets, played on one path with job
// ids of its own; it returns the outcome of the delivery it is about.
type pathScenario struct {
	name string
	play func(t *testing.T, p *twoPaths, path, job string) relay.Outcome
	// calls is how many times the agent is called; lastFire the job's
	// last-fire outcome afterwards ("" none).
	calls    int
	lastFire string
	kind     relay.OutcomeKind
}

var pathScenarios = []pathScenario{
	{name: "delivered", calls: 1, lastFire: relay.LastFireDelivered, kind: relay.Done,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			return p.deliver(t, path, p.lease(t, job))
		}},
	{name: "duplicate", calls: 1, lastFire: relay.LastFireDelivered, kind: relay.Done,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			l := p.lease(t, job)
			if first := p.deliver(t, path, l); first.Kind != relay.Done {
				t.Fatalf("first delivery: %+v", first)
			}
			return p.deliver(t, path, l) // the same lease again
		}},
	{name: "re-armed", calls: 0, kind: relay.Done,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			l := p.lease(t, job)
			if _, err := p.engine.Arm(context.Background(), relay.ArmRequest{AgentID: agentA, InstanceID: instanceA, JobID: job,
				FireAt: time.Now().Add(time.Hour), CallbackURL: p.agent.URL(), ScheduleID: "sch-" + job + "-again"}); err != nil {
				t.Fatal(err)
			}
			// A lease that waited (as after an extension): the claim's read
			// of the row no longer stands for it.
			l.ClaimedAt = time.Time{}
			return p.deliver(t, path, l)
		}},
	{name: "cancelled", calls: 0, kind: relay.Done,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			l := p.lease(t, job)
			if _, err := p.engine.Cancel(context.Background(), agentA, job); err != nil {
				t.Fatal(err)
			}
			l.ClaimedAt = time.Time{}
			return p.deliver(t, path, l)
		}},
	{name: "instance stopped", calls: 0, lastFire: relay.LastFireInstanceStopped, kind: relay.Done,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			ctx := context.Background()
			if err := p.engine.SetInstanceState(ctx, instanceA, relay.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = p.engine.SetInstanceState(ctx, instanceA, relay.InstanceRunning) }()
			return p.deliver(t, path, p.lease(t, job))
		}},
	{name: "agent waking up", calls: 1, kind: relay.Retry,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			p.agent.answer(job, answer(http.StatusServiceUnavailable, `{"error":"starting"}`, "7"))
			return p.deliver(t, path, p.lease(t, job))
		}},
	{name: "agent rejects", calls: 1, kind: relay.Dead,
		play: func(t *testing.T, p *twoPaths, path, job string) relay.Outcome {
			p.agent.answer(job, answer(http.StatusBadRequest, `{"error":"invalid_request"}`, ""))
			return p.deliver(t, path, p.lease(t, job))
		}},
}

// TestDeliveryPathsAgree plays every situation a fire meets on both paths,
// the signed relay route and in-process delivery, on both engines: the
// same checks hold (a duplicate is not delivered again, a re-armed or
// cancelled fire is dropped, a stopped instance's fire is dropped), the
// agent is called as often, the job's last fire is recorded alike, and the
// outcomes are equal, reasons and retry hints included.
func TestDeliveryPathsAgree(t *testing.T) {
	t.Parallel()
	for name, open := range deliveryEngines(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := startTwoPaths(t, open(t))
			for i, sc := range pathScenarios {
				outs := map[string]relay.Outcome{}
				for _, path := range []string{"route", "in-process"} {
					job := "j" + strconv.Itoa(i) + "-" + path[:2]
					out := sc.play(t, p, path, job)
					if out.Kind != sc.kind {
						t.Errorf("%s on %s: outcome %+v, want %s", sc.name, path, out, sc.kind)
					}
					if n := callsOf(p.agent, job); n != sc.calls {
						t.Errorf("%s on %s: the agent was called %d times, want %d", sc.name, path, n, sc.calls)
					}
					if got := p.lastFire(t, job); got != sc.lastFire {
						t.Errorf("%s on %s: last fire %q, want %q", sc.name, path, got, sc.lastFire)
					}
					out.Record = nil
					outs[path] = out
				}
				if outs["route"] != outs["in-process"] {
					t.Errorf("%s: the paths disagree:\n route      %+v\n in-process %+v", sc.name, outs["route"], outs["in-process"])
				}
			}
			if bad := p.agent.rejected(); len(bad) > 0 {
				t.Fatalf("the agent could not verify NAS's tokens: %v", bad)
			}
		})
	}
}

// callsOf counts the fires of job the agent received.
func callsOf(a *fakeAgent, job string) int {
	n := 0
	for _, f := range a.received() {
		if f.Body.JobID == job {
			n++
		}
	}
	return n
}
