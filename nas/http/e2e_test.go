package nashttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// live is NAS running in process on loopback listeners with real dispatchers
// on the embedded engine.
type live struct {
	t         *testing.T
	publicURL string
	internal  string
	engine    *memory.Engine
	svc       *nas.Service
	client    *http.Client
}

func startLive(t *testing.T, alg string, retry relay.RetryPolicy) *live {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	in, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &live{t: t, publicURL: "http://" + pub.Addr().String(), internal: "http://" + in.Addr().String(), engine: memory.New(memory.Options{})}
	keys, err := nas.NewEphemeralKeyRing(alg)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{
		{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA)},
	})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	l.svc, err = nas.New(nas.Options{
		Config: nas.Config{
			PublicURL: l.publicURL, RelayListen: in.Addr().String(), SigningAlg: alg,
			Relay:                 nas.RelayConfig{Secrets: []string{relaySecret}},
			AllowPrivateCallbacks: true, OperatorToken: opToken, DeliveryTimeout: 2 * time.Second,
		},
		Engine: l.engine, Verifier: agents, Keys: keys, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.svc.Close)
	srv := nashttp.NewServer(l.svc, nashttp.Options{Split: true, Logger: log})
	secret, _ := contract.ParseWebhookSecret(relaySecret)
	deliverer, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: l.internal, Keys: [][]byte{secret}, Logger: log, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	disp := relay.NewDispatcher(l.engine, deliverer, relay.DispatcherConfig{Logger: log, Retry: retry, Metrics: l.svc.Metrics().Relay()})
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ctx, pub) })
	wg.Go(func() { _ = srv.ServeInternal(ctx, in) })
	wg.Go(func() { _ = disp.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		deliverer.Close()
		_ = l.engine.Close()
	})
	l.client = apitest.Client(t)
	return l
}

// agentVerifier returns the verify function of a fake agent: the agent
// library's own fire-token verifier, reading NAS's JWKS over HTTP (keyfunc),
// once it has loaded the keys. The claims are returned for inspection.
func (l *live) agentVerifier(t *testing.T, methods ...string) func(token string, body []byte) (*contract.FireClaims, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := fireauth.New(ctx, fireauth.Config{
		JWKSURL: l.publicURL + contract.PathJWKS, Issuer: l.publicURL, Audience: contract.Audience(instanceA),
		Methods: methods, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if err := v.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	return func(token string, body []byte) (*contract.FireClaims, error) {
		var req contract.FireRequest
		if e := contract.DecodeBytes(body, &req); e != nil {
			return nil, e
		}
		if err := v.VerifyFire(context.Background(), token, body, req); err != nil {
			return nil, err
		}
		var c contract.FireClaims
		if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
			return nil, err
		}
		return &c, nil
	}
}

func eventually(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// call sends a JSON request with a bearer token and decodes the answer.
func (l *live) call(method, url, token string, in, out any) int {
	l.t.Helper()
	var body io.Reader
	if in != nil {
		data, _ := json.Marshal(in)
		body = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, url, body)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := l.client.Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			l.t.Fatalf("%s %s: %d %q: %v", method, url, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

func (l *live) provision(agentURL, job string, at time.Time) string {
	l.t.Helper()
	fa := contract.FormatTime(at)
	var resp contract.ProvisionResponse
	req := contract.ProvisionRequest{JobID: job, FireAt: contract.NewTime(at), AgentCallbackURL: agentURL, DedupKey: job + ":" + fa}
	if code := l.call("POST", l.publicURL+contract.PathProvision, tokenA, req, &resp); code != 200 {
		l.t.Fatalf("provision %s: %d", job, code)
	}
	return resp.ScheduleID
}

func waitFire(t *testing.T, a *fakeAgent, within time.Duration) receivedFire {
	t.Helper()
	select {
	case f := <-a.notify:
		return f
	case <-time.After(within):
		t.Fatal("no fire arrived")
		return receivedFire{}
	}
}

func TestNASEndToEnd(t *testing.T) {
	t.Parallel()
	l := startLive(t, nas.AlgEdDSA, relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 3, NoColdStart: true})
	agent := newFakeAgentVerifying(t, l.agentVerifier(t))
	agent.answer("failing", answer(500, `{"error":"server_error"}`, ""))

	base := time.Now().Add(400 * time.Millisecond).Truncate(time.Millisecond)
	want := map[string]time.Time{} // schedule id → fire_at
	for i := range 4 {
		at := base.Add(time.Duration(i*40) * time.Millisecond)
		want[l.provision(agent.URL(), fmt.Sprintf("job-%d", i), at)] = at
	}
	// A re-armed job: only the new fire may arrive.
	old := l.provision(agent.URL(), "rearmed", base)
	rearmAt := base.Add(200 * time.Millisecond)
	newSch := l.provision(agent.URL(), "rearmed", rearmAt)
	if newSch == old {
		t.Fatal("re-arm kept the schedule id")
	}
	want[newSch] = rearmAt
	// A cancelled job: its fire never arrives; the sentinel, due after it,
	// proves the dispatcher got past its time.
	l.provision(agent.URL(), "cancelled", base.Add(100*time.Millisecond))
	if code := l.call("POST", l.publicURL+contract.PathCancel, tokenA, contract.CancelRequest{JobID: "cancelled"}, &contract.OKResponse{}); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	sentinelAt := base.Add(300 * time.Millisecond)
	want[l.provision(agent.URL(), "sentinel", sentinelAt)] = sentinelAt

	got := map[string]receivedFire{}
	for len(got) < len(want) {
		f := waitFire(t, agent, 3*time.Second)
		if _, ok := want[f.Body.ScheduleID]; !ok {
			t.Fatalf("unexpected fire %+v", f.Body)
		}
		if _, dup := got[f.Body.ScheduleID]; dup {
			t.Fatalf("fire %s delivered twice", f.Body.ScheduleID)
		}
		got[f.Body.ScheduleID] = f
	}
	for sch, at := range want {
		f := got[sch]
		lag := f.At.Sub(at)
		// Never early is exact. The upper bound only tells a woken dispatcher
		// from one that waited for its 30 s recheck: the lag itself is
		// measured by the benchmarks, not asserted on a shared machine.
		if lag < 0 || lag > time.Second {
			t.Errorf("fire %s (%s) arrived %s after fire_at, want never before and well before the 30 s recheck", sch, f.Body.JobID, lag)
		}
		if f.Claims.Audience != contract.Audience(instanceA) || f.Claims.ScheduleID != sch {
			t.Errorf("claims %+v", f.Claims)
		}
	}
	select {
	case f := <-agent.notify:
		t.Fatalf("an extra fire arrived: %+v", f.Body)
	default:
	}

	// A failing agent: retried, then dead-lettered; a replay delivers it.
	failAt := time.Now().Add(50 * time.Millisecond)
	failSch := l.provision(agent.URL(), "failing", failAt)
	for attempt := 1; attempt <= 3; attempt++ {
		f := waitFire(t, agent, 3*time.Second)
		if f.Body.ScheduleID != failSch || f.Body.Attempt != attempt {
			t.Fatalf("attempt %d: got %+v", attempt, f.Body)
		}
	}
	var dlq contract.DLQListResponse
	eventually(t, 3*time.Second, func() bool {
		l.call("GET", l.internal+contract.PathOperatorDLQ+"?agent_id="+agentA, opToken, nil, &dlq)
		return len(dlq.Entries) == 1
	})
	if dlq.Entries[0].ScheduleID != failSch || dlq.Entries[0].Attempts != 3 {
		t.Fatalf("dead letter %+v", dlq.Entries[0])
	}
	var list contract.ListResponse
	l.call("GET", l.publicURL+contract.PathList, tokenA, nil, &list)
	if len(list.FailedFires) != 1 || list.FailedFires[0].ScheduleID != failSch {
		t.Fatalf("failed fires %+v", list.FailedFires)
	}
	agent.answer("failing", nil)
	var replay contract.DLQReplayResponse
	if code := l.call("POST", l.internal+contract.PathOperatorDLQReplay, opToken, contract.DLQReplayRequest{ScheduleIDs: []string{failSch}}, &replay); code != 200 || replay.Replayed != 1 {
		t.Fatalf("replay: %d %+v", code, replay)
	}
	f := waitFire(t, agent, 3*time.Second)
	if f.Body.ScheduleID != failSch || f.Body.JobID != "failing" {
		t.Fatalf("replayed fire %+v", f.Body)
	}
	eventually(t, 3*time.Second, func() bool {
		_, err := l.engine.Get(context.Background(), agentA, "failing")
		return err != nil // acked and gone
	})
	if bad := agent.rejected(); len(bad) > 0 {
		t.Fatalf("the agent refused tokens: %v", bad)
	}
}

// provisionSpelt provisions job at fire_at written exactly as spelt.
func (l *live) provisionSpelt(agentURL, job, spelt string) string {
	l.t.Helper()
	req, _ := http.NewRequest("POST", l.publicURL+contract.PathProvision, bytes.NewReader([]byte(fmt.Sprintf(
		`{"job_id":%q,"fire_at":%q,"agent_callback_url":%q,"dedup_key":%q}`, job, spelt, agentURL, job+":"+spelt))))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tokenA)
	resp, err := l.client.Do(req)
	if err != nil {
		l.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out contract.ProvisionResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.FireAt.Text() != spelt {
		l.t.Fatalf("provision %s at %s: %d %+v %v", job, spelt, resp.StatusCode, out, err)
	}
	return out.ScheduleID
}

// A fire provisioned with an offset reaches the agent in that spelling (body
// and token), passes the agent library's verifier and is accepted; a fire the
// agent refuses for good stays in failed_fires across reads until acknowledged.
func TestNASEndToEndSpeltFireAndFailedFires(t *testing.T) {
	t.Parallel()
	l := startLive(t, nas.AlgES256, relay.RetryPolicy{Base: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond, MaxAttempts: 3, NoColdStart: true})
	agent := newFakeAgentVerifying(t, l.agentVerifier(t))
	agent.answer("refused", answer(400, `{"error":"invalid_request"}`, ""))

	at := time.Now().Add(300 * time.Millisecond).Truncate(time.Millisecond)
	spelt := at.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000-07:00")
	sch := l.provisionSpelt(agent.URL(), "spelt", spelt)
	f := waitFire(t, agent, 3*time.Second)
	if f.Body.ScheduleID != sch || f.Body.FireAt.Text() != spelt || f.Claims.FireAt != spelt {
		t.Fatalf("fire %+v (fire_at %q, claim %q), provisioned %q", f.Body, f.Body.FireAt.Text(), f.Claims.FireAt, spelt)
	}

	refusedAt := time.Now().Add(50 * time.Millisecond).Truncate(time.Millisecond)
	refusedSpelt := refusedAt.In(time.FixedZone("", -4*3600)).Format("2006-01-02T15:04:05.000-07:00")
	refused := l.provisionSpelt(agent.URL(), "refused", refusedSpelt)
	if f := waitFire(t, agent, 3*time.Second); f.Body.ScheduleID != refused {
		t.Fatalf("fire %+v", f.Body)
	}
	var list contract.ListResponse
	eventually(t, 3*time.Second, func() bool {
		l.call("GET", l.publicURL+contract.PathList, tokenA, nil, &list)
		return len(list.FailedFires) == 1
	})
	for range 2 { // a read consumes nothing
		list = contract.ListResponse{}
		l.call("GET", l.publicURL+contract.PathList, tokenA, nil, &list)
		if len(list.FailedFires) != 1 || list.FailedFires[0].ScheduleID != refused || list.FailedFires[0].FireAt.Text() != refusedSpelt {
			t.Fatalf("failed fires %+v", list.FailedFires)
		}
	}
	var ack contract.FailedFiresAckResponse
	if code := l.call("POST", l.publicURL+contract.PathFailedFiresAck, tokenA, contract.FailedFiresAckRequest{ScheduleIDs: []string{refused}}, &ack); code != 200 || ack.Acknowledged != 1 {
		t.Fatalf("ack: %d %+v", code, ack)
	}
	list = contract.ListResponse{}
	l.call("GET", l.publicURL+contract.PathList, tokenA, nil, &list)
	if len(list.FailedFires) != 0 {
		t.Fatalf("failed fires after the ack %+v", list.FailedFires)
	}
	if bad := agent.rejected(); len(bad) > 0 {
		t.Fatalf("the agent refused tokens: %v", bad)
	}
}
