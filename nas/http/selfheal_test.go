package nashttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// stepClock is a clock tests move by hand.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *stepClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// relayFire delivers job's armed fire through the relay route (delivery id
// id), signed at the service's time, and returns NAS's answer.
func (b *bundle) relayFire(t *testing.T, clk *stepClock, id, job string) contract.RelayResponse {
	t.Helper()
	row, err := b.engine.Get(context.Background(), agentA, job)
	if err != nil {
		t.Fatalf("get %s: %v", job, err)
	}
	rec := b.do(b.internal, b.signedRelay(id, clk.Now(), relayBody(t, agentA, job, row.ScheduleID, row.FireAt, 1)))
	if rec.Code != http.StatusOK {
		t.Fatalf("relay %s: %d %s", job, rec.Code, rec.Body)
	}
	// The dispatcher acks a final answer: the one-shot goes.
	if _, err := b.engine.Cancel(context.Background(), agentA, job); err != nil {
		t.Fatal(err)
	}
	return decodeBody[contract.RelayResponse](t, rec)
}

func (b *bundle) listOf(t *testing.T, token string) contract.ListResponse {
	t.Helper()
	rec := b.do(b.public, request{method: http.MethodGet, path: contract.PathList, token: token})
	if rec.Code != http.StatusOK {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	return decodeBody[contract.ListResponse](t, rec)
}

func (b *bundle) unarmedJobs(t *testing.T, query string) []string {
	t.Helper()
	rec := b.do(b.internal, request{method: http.MethodGet, path: contract.PathOperatorUnarmed + query, token: opToken})
	if rec.Code != http.StatusOK {
		t.Fatalf("unarmed%s: %d %s", query, rec.Code, rec.Body)
	}
	resp := decodeBody[contract.UnarmedResponse](t, rec)
	if resp.UnarmedAfter != b.svc.Config().UnarmedAfter.String() || resp.Truncated {
		t.Fatalf("unarmed response %+v", resp)
	}
	var out []string
	for _, u := range resp.Unarmed {
		out = append(out, u.AgentID+"/"+u.JobID+":"+u.Outcome)
	}
	return out
}

func (b *bundle) metric(t *testing.T, name string) string {
	t.Helper()
	rec := b.do(b.internal, request{method: http.MethodGet, path: contract.PathMetrics})
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// countLogs counts the JSON log records whose msg is msg.
func countLogs(t *testing.T, logs string, msg string) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err == nil && rec["msg"] == msg {
			n++
		}
	}
	return n
}

// A job whose fire was delivered and that its agent did not arm again is
// listed to the agent at once and reported to operators after
// unarmed_after: the route, the metric and one warn line. A cancel clears
// it, arming again too; an agent that answered gone is not reported.
func TestNASReportsJobsLeftUnarmed(t *testing.T) {
	t.Parallel()
	clk := &stepClock{t: time.Now().Truncate(time.Millisecond)}
	var logs syncBuffer
	b := setup(t, func(c *nas.Config, o *nas.Options) {
		o.Now, c.UnarmedAfter = clk.Now, time.Minute
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	for _, job := range []string{"kept", "cancelled", "gone", "rearmed"} {
		b.provision(tokenA, job, clk.Now().Add(time.Second))
	}
	b.agent.answer("gone", func(w http.ResponseWriter) {
		contract.WriteJSON(w, http.StatusOK, contract.FireResponse{Status: contract.FireGone, JobID: "gone"})
	})
	clk.Add(2 * time.Second)
	for i, job := range []string{"kept", "cancelled", "gone", "rearmed"} {
		if r := b.relayFire(t, clk, "d"+string(rune('0'+i)), job); r.Status != contract.RelayDelivered {
			t.Fatalf("relay %s: %+v", job, r)
		}
	}
	// The agent learns of its jobs' last fires at once.
	list := b.listOf(t, tokenA)
	var listed []string
	for _, u := range list.Unarmed {
		listed = append(listed, u.JobID+":"+u.Outcome)
		if u.AgentID != "" || u.InstanceID != "" || u.ScheduleID == "" || u.FireAt.IsZero() || u.OutcomeAt.IsZero() {
			t.Errorf("agent's unarmed entry %+v", u)
		}
	}
	if strings.Join(listed, " ") != "cancelled:delivered kept:delivered rearmed:delivered" {
		t.Fatalf("agent's unarmed list %v", listed)
	}
	if list.Instance == nil || list.Instance.InstanceID != instanceA || list.Instance.Stopped {
		t.Fatalf("instance %+v", list.Instance)
	}
	if got := b.listOf(t, tokenB).Unarmed; len(got) != 0 {
		t.Fatalf("agent B sees agent A's jobs: %+v", got)
	}
	// Operators see nothing before unarmed_after.
	if got := b.unarmedJobs(t, ""); len(got) != 0 {
		t.Fatalf("reported before unarmed_after: %v", got)
	}
	clk.Add(time.Minute)
	want := "agent-a/cancelled:delivered agent-a/kept:delivered agent-a/rearmed:delivered"
	if got := strings.Join(b.unarmedJobs(t, ""), " "); got != want {
		t.Fatalf("reported %q, want %q", got, want)
	}
	if got := strings.Join(b.unarmedJobs(t, "?agent="+agentA), " "); got != want {
		t.Fatalf("reported for agent A %q, want %q", got, want)
	}
	if got := b.unarmedJobs(t, "?agent="+agentB); len(got) != 0 {
		t.Fatalf("reported for agent B: %v", got)
	}
	for range 2 {
		if err := b.svc.SelfHeal().CheckUnarmed(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.metric(t, "chronos_nas_unarmed_jobs"); got != "3" {
		t.Fatalf("chronos_nas_unarmed_jobs = %q, want 3", got)
	}
	if n := countLogs(t, logs.String(), "job left without an armed fire after its last fire"); n != 3 {
		t.Fatalf("%d warn lines for 3 unarmed jobs over two checks, want 3:\n%s", n, logs.String())
	}
	// Durations in NAS's JSON log are Go duration strings, not nanoseconds.
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "job left without an armed fire after its last fire" {
			continue
		}
		s, ok := rec["unarmed_for"].(string)
		d, err := time.ParseDuration(s)
		if !ok || err != nil || d < time.Minute {
			t.Fatalf("unarmed_for = %#v, want a Go duration string of at least 1m0s: %s", rec["unarmed_for"], line)
		}
	}
	// The agent cancels one job and arms another again.
	if rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathCancel, token: tokenA, body: contract.CancelRequest{JobID: "cancelled"}}); rec.Code != 200 {
		t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
	}
	b.provision(tokenA, "rearmed", clk.Now().Add(time.Hour))
	if got := strings.Join(b.unarmedJobs(t, ""), " "); got != "agent-a/kept:delivered" {
		t.Fatalf("after a cancel and an arm: %q", got)
	}
	if err := b.svc.SelfHeal().CheckUnarmed(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.metric(t, "chronos_nas_unarmed_jobs"); got != "1" {
		t.Fatalf("chronos_nas_unarmed_jobs = %q, want 1", got)
	}
}

func TestNASUnarmedRouteRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		req    request
		status int
		code   string
	}{
		{request{method: "GET", path: contract.PathOperatorUnarmed}, 401, contract.CodeUnauthenticated},
		{request{method: "GET", path: contract.PathOperatorUnarmed, token: tokenA}, 403, contract.CodeForbidden},
		{request{method: "GET", path: contract.PathOperatorUnarmed + "?agent_id=x", token: opToken, invalid: true}, 400, contract.CodeInvalidRequest},
		{request{method: "GET", path: contract.PathOperatorUnarmed + "?agent=", token: opToken, invalid: true}, 400, contract.CodeInvalidRequest},
		{request{method: "GET", path: contract.PathOperatorUnarmed + "?agent=a&agent=b", token: opToken, invalid: true}, 400, contract.CodeInvalidRequest},
	} {
		rec := b.do(b.internal, tc.req)
		if rec.Code != tc.status || errCode(t, rec) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.req.path, rec.Code, rec.Body, tc.status, tc.code)
		}
	}
}

// reconcileReceiver is an agent's callback serving both routes: fires go to
// the fake agent, reconcile requests are verified as an agent verifies them
// and answered by answers in turn (then 202).
type reconcileReceiver struct {
	srv      *httptest.Server
	verifier *fireauth.JWTVerifier
	mu       sync.Mutex
	answers  []int
	got      []contract.ReconcileRequest
	errs     []error
	arrived  chan struct{}
}

func newReconcileReceiver(t *testing.T, b *bundle, answers ...int) *reconcileReceiver {
	t.Helper()
	v, err := fireauth.NewStatic(b.svc.JWKS(), fireauth.Config{Issuer: publicURL, Audience: contract.Audience(instanceA), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := &reconcileReceiver{verifier: v, answers: answers, arrived: make(chan struct{}, 10)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != contract.PathReconcile {
			b.agent.srv.Config.Handler.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		tok, _ := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		err := v.VerifyReconcile(req.Context(), tok, body)
		var rr contract.ReconcileRequest
		if e := contract.DecodeBytes(body, &rr); e != nil && err == nil {
			err = e
		}
		r.mu.Lock()
		r.got, r.errs = append(r.got, rr), append(r.errs, err)
		status := http.StatusAccepted
		if len(r.answers) > 0 {
			status, r.answers = r.answers[0], r.answers[1:]
		}
		r.mu.Unlock()
		r.arrived <- struct{}{}
		if err != nil {
			contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "%v", err))
			return
		}
		if status != http.StatusAccepted {
			contract.WriteError(w, contract.Errorf(status, contract.CodeUnavailable, "waking"))
			return
		}
		contract.WriteJSON(w, http.StatusAccepted, contract.ReconcileResponse{Status: contract.ReconcileStatusReconciling})
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// An operator stops an instance: its fire is dropped and listed to the
// agent with the stop; the operator starts it again: NAS asks the agent to
// reconcile at the callback it armed with, with a token the agent's own
// verifier accepts, retrying while the agent answers 503.
func TestNASInstanceStopStartAsksTheAgentToReconcile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recv := newReconcileReceiver(t, b, http.StatusServiceUnavailable)
	body := b.provisionBody("hourly", time.Now().Add(-time.Second))
	body.AgentCallbackURL = recv.srv.URL
	if rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathProvision, token: tokenA, body: body}); rec.Code != 200 {
		t.Fatalf("provision: %d %s", rec.Code, rec.Body)
	}
	stop := "/api/operator/instances/" + instanceA + "/stop"
	start := "/api/operator/instances/" + instanceA + "/start"
	if rec := b.do(b.internal, request{method: http.MethodPost, path: stop, token: opToken}); rec.Code != 200 {
		t.Fatalf("stop: %d %s", rec.Code, rec.Body)
	}
	clk := &stepClock{t: time.Now()}
	if r := b.relayFire(t, clk, "d1", "hourly"); r.Status != contract.RelayInstanceStopped {
		t.Fatalf("relay while stopped: %+v", r)
	}
	list := b.listOf(t, tokenA)
	if len(list.Unarmed) != 1 || list.Unarmed[0].Outcome != contract.LastFireInstanceStopped || !list.Unarmed[0].FireAt.Equal(body.FireAt.Time) {
		t.Fatalf("unarmed after a drop: %+v", list.Unarmed)
	}
	if in := list.Instance; in == nil || !in.Stopped || in.StoppedAt == nil || in.StartedAt != nil {
		t.Fatalf("instance while stopped: %+v", in)
	}
	if len(b.agent.received()) != 0 {
		t.Fatal("a fire reached a stopped instance")
	}

	if rec := b.do(b.internal, request{method: http.MethodPost, path: start, token: opToken}); rec.Code != 200 {
		t.Fatalf("start: %d %s", rec.Code, rec.Body)
	}
	for range 2 {
		select {
		case <-recv.arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("no reconcile request reached the agent")
		}
	}
	recv.mu.Lock()
	got, errs := recv.got, recv.errs
	recv.mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d reconcile requests, want 2 (a 503, then a retry)", len(got))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reconcile request %d did not verify: %v", i, err)
		}
		if got[i] != (contract.ReconcileRequest{InstanceID: instanceA, Reason: contract.ReconcileReasonInstanceStarted}) {
			t.Fatalf("reconcile body %+v", got[i])
		}
	}
	list = b.listOf(t, tokenA)
	if in := list.Instance; in == nil || in.Stopped || in.StoppedAt == nil || in.StartedAt == nil || in.StartedAt.Before(in.StoppedAt.Time) {
		t.Fatalf("instance after start: %+v", in)
	}
}

// TestNASEnableAsksTheAgentToReconcile: enabling a disabled agent sends a
// verified reconcile request (reason agent_enabled) to the callback of its
// instance, once; disabling it, or enabling an agent that is not disabled,
// sends none.
func TestNASEnableAsksTheAgentToReconcile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	recv := newReconcileReceiver(t, b)
	body := b.provisionBody("hourly", time.Now().Add(time.Hour))
	body.AgentCallbackURL = recv.srv.URL
	if rec := b.do(b.public, request{method: http.MethodPost, path: contract.PathProvision, token: tokenA, body: body}); rec.Code != 200 {
		t.Fatalf("provision: %d %s", rec.Code, rec.Body)
	}
	for _, step := range []string{"enable", "disable", "disable", "enable"} {
		if rec := b.do(b.internal, request{method: http.MethodPost, path: "/api/operator/agents/" + agentA + "/" + step, token: opToken}); rec.Code != 200 {
			t.Fatalf("%s: %d %s", step, rec.Code, rec.Body)
		}
	}
	select {
	case <-recv.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconcile request reached the agent after enable")
	}
	// A second enable of an enabled agent asks nothing: the one request
	// is the last one to arrive.
	if rec := b.do(b.internal, request{method: http.MethodPost, path: "/api/operator/agents/" + agentA + "/enable", token: opToken}); rec.Code != 200 {
		t.Fatalf("enable again: %d %s", rec.Code, rec.Body)
	}
	b.svc.Close()
	recv.mu.Lock()
	got, errs := recv.got, recv.errs
	recv.mu.Unlock()
	if len(got) != 1 || errs[0] != nil {
		t.Fatalf("reconcile requests %+v (errors %v), want one that verifies", got, errs)
	}
	if got[0] != (contract.ReconcileRequest{InstanceID: instanceA, Reason: contract.ReconcileReasonAgentEnabled}) {
		t.Fatalf("reconcile body %+v", got[0])
	}
}
