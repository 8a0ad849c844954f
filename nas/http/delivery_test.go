package nashttp_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// deliveryNAS is NAS serving its relay route on loopback with a real
// dispatcher over an engine, and a fake agent that verifies every token.
type deliveryNAS struct {
	engine relay.Engine
	agent  *fakeAgent
}

// routeNAS is NAS serving its relay route on loopback, and a relay
// deliverer that calls that route with signed requests.
type routeNAS struct {
	svc   *nas.Service
	route *relay.HTTPDeliverer
	log   *slog.Logger
}

// serveRelayRoute runs NAS on engine, serving its relay route on loopback
// until the test ends, with relay retries set to retry.
func serveRelayRoute(t *testing.T, engine relay.Engine, retry nas.RetryConfig) routeNAS {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := nas.NewEphemeralKeyRing(nas.AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA)}})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{
			PublicURL: publicURL, AllowPrivateCallbacks: true, DeliveryTimeout: 2 * time.Second,
			Relay: nas.RelayConfig{Secrets: []string{relaySecret}, Retry: retry},
		},
		Engine: engine, Verifier: agents, Keys: keys, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := nashttp.NewServer(svc, nashttp.Options{Logger: log})
	secret, _ := contract.ParseWebhookSecret(relaySecret)
	route, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: "http://" + ln.Addr().String(), Keys: [][]byte{secret}, Logger: log, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ctx, ln) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		route.Close()
	})
	return routeNAS{svc: svc, route: route, log: log}
}

// startDeliveryNAS runs NAS and one dispatcher on engine until the test
// ends. The ladder is short so retries come within milliseconds.
func startDeliveryNAS(t *testing.T, engine relay.Engine, maxAuthAttempts int) *deliveryNAS {
	t.Helper()
	n := serveRelayRoute(t, engine, nas.RetryConfig{MaxAuthAttempts: maxAuthAttempts})
	// The ladder: 10 ms to 20 ms, ten attempts; the dispatcher rechecks the
	// store often so a retry is not held up by a missed wake-up.
	disp := relay.NewDispatcher(engine, n.route, relay.DispatcherConfig{
		Logger: n.log, Recheck: 20 * time.Millisecond,
		Retry: relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 10, NoColdStart: true},
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = disp.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return &deliveryNAS{engine: engine, agent: newFakeAgent(t, n.svc.JWKS())}
}

// arm arms job for agent A, due now.
func (d *deliveryNAS) arm(t *testing.T, job string) {
	t.Helper()
	_, err := d.engine.Arm(context.Background(), relay.ArmRequest{AgentID: agentA, InstanceID: instanceA, JobID: job,
		FireAt: time.Now(), CallbackURL: d.agent.URL(), ScheduleID: "sch-" + job})
	if err != nil {
		t.Fatal(err)
	}
}

// deadLetter waits for job's dead letter.
func (d *deliveryNAS) deadLetter(t *testing.T, job string) relay.DeadLetter {
	t.Helper()
	var found relay.DeadLetter
	eventually(t, 10*time.Second, func() bool {
		items, _, err := d.engine.ListDead(context.Background(), agentA, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			if it.JobID == job {
				found = it
				return true
			}
		}
		return false
	})
	return found
}

// calls counts the fires of job the agent received.
func (d *deliveryNAS) calls(job string) int {
	n := 0
	for _, f := range d.agent.received() {
		if f.Body.JobID == job {
			n++
		}
	}
	return n
}

// deliveryEngines are the engines the delivery tests run on.
func deliveryEngines(t *testing.T) map[string]func(t *testing.T) relay.Engine {
	srv := redistest.Start(t, redistest.Options{})
	return map[string]func(t *testing.T) relay.Engine{
		"memory": func(t *testing.T) relay.Engine {
			e := memory.New(memory.Options{})
			t.Cleanup(func() { _ = e.Close() })
			return e
		},
		"redis": func(t *testing.T) relay.Engine {
			prefix := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
			e, err := relayredis.Open(context.Background(), srv.URL()+"?prefix="+prefix, relayredis.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close() })
			return e
		},
	}
}

// TestNASDeliveryAnswers follows the delivery-answers table of
// docs/operations.md through the real relay route and dispatcher on both
// engines: a token refused once is delivered on the retry and runs once; a
// token refused every time is dead-lettered after exactly
// relay.retry.max_auth_attempts calls with the agent's answer as the reason;
// a 400 is dead-lettered after one call.
func TestNASDeliveryAnswers(t *testing.T) {
	t.Parallel()
	for name, open := range deliveryEngines(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const maxAuth = 3
			d := startDeliveryNAS(t, open(t), maxAuth)

			t.Run("401 once then accepted", func(t *testing.T) {
				var calls, accepted atomic.Int32
				d.agent.answer("cold-keys", func(w http.ResponseWriter) {
					if calls.Add(1) == 1 {
						answer(401, `{"error":"invalid_token","error_description":"unknown kid"}`, "")(w)
						return
					}
					accepted.Add(1)
					contract.WriteJSON(w, http.StatusAccepted, contract.FireResponse{Status: contract.FireAccepted, JobID: "cold-keys", RunID: "run-1"})
				})
				d.arm(t, "cold-keys")
				eventually(t, 10*time.Second, func() bool {
					_, err := d.engine.Get(context.Background(), agentA, "cold-keys")
					return errors.Is(err, relay.ErrNotFound)
				})
				if n, a := d.calls("cold-keys"), accepted.Load(); n != 2 || a != 1 {
					t.Fatalf("%d calls, %d accepted; want the refused one and one accepted retry", n, a)
				}
			})

			t.Run("403 every time", func(t *testing.T) {
				d.agent.answer("wrong-aud", answer(403, `{"error":"invalid_audience"}`, ""))
				d.arm(t, "wrong-aud")
				dl := d.deadLetter(t, "wrong-aud")
				if n := d.calls("wrong-aud"); n != maxAuth || dl.Attempt != maxAuth {
					t.Fatalf("%d calls, dead letter at attempt %d; want exactly %d", n, dl.Attempt, maxAuth)
				}
				for _, want := range []string{"403 invalid_audience", "refused the fire token 3 times", "max_auth_attempts"} {
					if !strings.Contains(dl.Reason, want) {
						t.Fatalf("reason %q does not say %q", dl.Reason, want)
					}
				}
			})

			t.Run("400 at once", func(t *testing.T) {
				d.agent.answer("bad-body", answer(400, `{"error":"invalid_request"}`, ""))
				d.arm(t, "bad-body")
				dl := d.deadLetter(t, "bad-body")
				if n := d.calls("bad-body"); n != 1 || dl.Attempt != 1 || !strings.Contains(dl.Reason, "agent answered 400 invalid_request") {
					t.Fatalf("%d calls, dead letter %+v; want one call and the 400 as the reason", n, dl)
				}
			})
			if bad := d.agent.rejected(); len(bad) > 0 {
				t.Fatalf("the agent could not verify NAS's tokens: %v", bad)
			}
		})
	}
}

// TestNASRelayRefusedTokenByAttempt calls the relay route directly: with the
// default relay.retry.max_auth_attempts (4), a 401 at attempts 1 to 3 is a
// 502 the relay retries (with the agent's Retry-After), and at attempt 4 a
// rejection whose reason names the answer.
func TestNASRelayRefusedTokenByAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fireAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	var sch string
	b.armAt(t, "job-1", fireAt, &sch)
	b.agent.answer("job-1", answer(401, `{"error":"invalid_token"}`, "2"))
	for attempt := 1; attempt <= 4; attempt++ {
		rec := b.do(b.internal, b.signedRelay("d-"+strconv.Itoa(attempt), time.Now(), relayBody(t, agentA, "job-1", sch, fireAt, attempt)))
		if attempt < 4 {
			if rec.Code != http.StatusBadGateway || errCode(t, rec) != contract.CodeAgentUnavailable || rec.Header().Get("Retry-After") != "2" {
				t.Fatalf("attempt %d: %d %s (Retry-After %q), want 502 agent_unavailable", attempt, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
			}
			continue
		}
		got := decodeBody[contract.RelayResponse](t, rec)
		if rec.Code != 200 || got.Status != contract.RelayRejected || !strings.Contains(got.Reason, "agent answered 401 invalid_token") {
			t.Fatalf("attempt 4: %d %+v, want rejected naming the 401", rec.Code, got)
		}
	}
	if n := len(b.agent.received()); n != 4 {
		t.Fatalf("the agent was called %d times, want 4", n)
	}
}
