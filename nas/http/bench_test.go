package nashttp_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// stubCaller answers every fire as accepted without a network call.
type stubCaller struct{}

func (stubCaller) Fire(context.Context, string, string, []byte) agentcall.FireResult {
	return agentcall.FireResult{Outcome: agentcall.OutcomeDelivered, HTTPStatus: 202, AgentStatus: "accepted"}
}

// BenchmarkRelayRoute measures one relay call through the handler: signature
// check, strict decode, de-dup record, row lookup, token minting, and the
// call to the agent (stubbed, or a real agent over loopback).
func BenchmarkRelayRoute(b *testing.B) {
	for _, alg := range []string{nas.AlgEdDSA, nas.AlgES256, nas.AlgRS256} {
		for _, mode := range []string{"stub-agent", "loopback-agent"} {
			b.Run(alg+"/"+mode, func(b *testing.B) {
				f := newBenchFire(b, alg, mode)
				h := nashttp.NewServer(f.svc, nashttp.Options{Logger: slog.New(slog.DiscardHandler)}).Handler()
				body := relayBody(b, agentA, "job", f.row.ScheduleID, f.fireAt, 1)
				secret, _ := contract.ParseWebhookSecret(relaySecret)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					req := httptest.NewRequest(http.MethodPost, contract.PathRelay, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.RemoteAddr = "127.0.0.1:40000" // the relay route answers NAS's own host only
					for k, v := range contract.WebhookHeaders([][]byte{secret}, "d-"+strconv.Itoa(i), time.Now(), body) {
						req.Header.Set(k, v)
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
				}
			})
		}
	}
}

// BenchmarkLocalDelivery measures one fire handed to NAS in process, as a
// dispatcher inside NAS hands it: the checks on the claimed lease, token
// minting and the call to the agent (stubbed, or a real agent over
// loopback). Compare with BenchmarkRelayRoute, the same fire over the signed
// relay route.
func BenchmarkLocalDelivery(b *testing.B) {
	for _, alg := range []string{nas.AlgEdDSA, nas.AlgES256} {
		for _, mode := range []string{"stub-agent", "loopback-agent"} {
			b.Run(alg+"/"+mode, func(b *testing.B) {
				f := newBenchFire(b, alg, mode)
				d := f.svc.LocalDeliverer()
				lease := relay.Lease{OneShot: f.row, Token: 0}
				lease.Attempt = 1
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					lease.Token++ // a lease of its own each time, as each claim is
					lease.ClaimedAt = time.Now()
					if out := d.Deliver(ctx, lease); out.Kind != relay.Done || out.Record == nil {
						b.Fatalf("outcome %+v", out)
					}
				}
			})
		}
	}
}

// retryCaller answers every fire as the agent answering status: a retry.
type retryCaller struct{ status int }

func (c retryCaller) Fire(context.Context, string, string, []byte) agentcall.FireResult {
	return agentcall.FireResult{Outcome: agentcall.OutcomeRetry, HTTPStatus: c.status, ColdStart: c.status == http.StatusServiceUnavailable,
		Reason: "agent answered " + strconv.Itoa(c.status), RetryAfter: time.Second}
}

// BenchmarkLocalDeliveryRetry measures one fire handed to NAS in process
// that the agent does not take (a 503: the agent is down; a 500): the path
// from the agent's answer to the dispatcher's Retry outcome.
func BenchmarkLocalDeliveryRetry(b *testing.B) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError} {
		b.Run(strconv.Itoa(status), func(b *testing.B) {
			f := newBenchFire(b, nas.AlgEdDSA, "stub-agent")
			f.svc = newBenchService(b, f.eng, retryCaller{status: status})
			d := f.svc.LocalDeliverer()
			lease := relay.Lease{OneShot: f.row, Token: 0}
			lease.Attempt = 1
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				lease.Token++
				lease.ClaimedAt = time.Now()
				if out := d.Deliver(ctx, lease); out.Kind != relay.Retry || out.RetryAfter != time.Second {
					b.Fatalf("outcome %+v", out)
				}
			}
		})
	}
}

// benchFire is a NAS service on the embedded engine with one armed fire,
// for the delivery benchmarks.
type benchFire struct {
	svc    *nas.Service
	eng    relay.Engine
	row    relay.OneShot
	fireAt time.Time
}

// newBenchService builds a NAS service signing with EdDSA on eng that calls
// agents with caller.
func newBenchService(b *testing.B, eng relay.Engine, caller nas.FireCaller) *nas.Service {
	b.Helper()
	keys, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		b.Fatal(err)
	}
	agents, _ := nas.NewStaticAgents(nil)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: publicURL, Relay: nas.RelayConfig{Secrets: []string{relaySecret}}, AllowPrivateCallbacks: true},
		Engine: eng, Verifier: agents, Keys: keys, Logger: slog.New(slog.DiscardHandler), Caller: caller,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	return svc
}

// newBenchFire builds a NAS service signing with alg whose one armed fire
// goes to an agent that is stubbed (mode "stub-agent") or answers over
// loopback ("loopback-agent"); everything is closed when b ends.
func newBenchFire(b *testing.B, alg, mode string) benchFire {
	b.Helper()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contract.WriteJSON(w, http.StatusAccepted, contract.FireResponse{Status: "accepted"})
	}))
	b.Cleanup(agent.Close)
	eng := memory.New(memory.Options{})
	b.Cleanup(func() { _ = eng.Close() })
	keys, err := nas.NewEphemeralKeyRing(alg)
	if err != nil {
		b.Fatal(err)
	}
	agents, _ := nas.NewStaticAgents(nil)
	opts := nas.Options{
		Config: nas.Config{PublicURL: publicURL, SigningAlg: alg, Relay: nas.RelayConfig{Secrets: []string{relaySecret}}, AllowPrivateCallbacks: true},
		Engine: eng, Verifier: agents, Keys: keys, Logger: slog.New(slog.DiscardHandler),
	}
	if mode == "stub-agent" {
		opts.Caller = stubCaller{}
	}
	svc, err := nas.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Close)
	fireAt := time.Now().Truncate(time.Millisecond)
	res, err := eng.Arm(context.Background(), relay.ArmRequest{AgentID: agentA, InstanceID: instanceA, JobID: "job", FireAt: fireAt, CallbackURL: agent.URL, ScheduleID: "sch-1"})
	if err != nil {
		b.Fatal(err)
	}
	return benchFire{svc: svc, eng: eng, row: res.OneShot, fireAt: fireAt}
}

// BenchmarkProvision measures one provision call through the agent API
// handler: authentication, the strict decode, the callback and quota checks
// and the arm, on the embedded engine. An agent re-arms its job after every
// fire, so this is the API's share of a fire.
func BenchmarkProvision(b *testing.B) {
	eng := memory.New(memory.Options{})
	defer eng.Close()
	keys, err := nas.NewEphemeralKeyRing(nas.AlgES256)
	if err != nil {
		b.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA)}})
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: publicURL, Relay: nas.RelayConfig{Secrets: []string{relaySecret}}, AllowPrivateCallbacks: true,
			Limits: nas.LimitsConfig{RatePerSecond: 1e9, Burst: 1 << 30, MaxArmedPerAgent: 1 << 30}},
		Engine: eng, Verifier: agents, Keys: keys, Logger: log,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Close()
	h := nashttp.NewServer(svc, nashttp.Options{Logger: log}).Handler()
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		at := contract.FormatTime(base.Add(time.Duration(i) * time.Millisecond))
		job := "job-" + strconv.Itoa(i%1000)
		body := `{"job_id":"` + job + `","fire_at":"` + at + `","agent_callback_url":"http://127.0.0.1:9/cb","dedup_key":"` + job + ":" + at + `"}`
		req := httptest.NewRequest(http.MethodPost, contract.PathProvision, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokenA)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}
