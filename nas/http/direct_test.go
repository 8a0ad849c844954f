package nashttp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// The agents of the direct delivery tests: agent-a and agent-d may use
// direct delivery, agent-b and agent-c may not (agent-c says so).
const (
	tokenC    = "token-of-agent-c"
	tokenD    = "token-of-agent-d"
	agentC    = "agent-c"
	agentD    = "agent-d"
	instanceC = "inst-c"
	instanceD = "inst-d"
)

// writeKeyFile writes a fresh cron key encryption key to a 0600 file.
func writeKeyFile(t *testing.T) string {
	t.Helper()
	text, err := cronkey.GenerateEncryptionKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cron-key-encryption.key")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// directEnv is a NAS whose agents file allows agent-a and agent-d direct
// delivery, its log and its encryption key file.
type directEnv struct {
	*bundle
	log     *syncBuffer
	keyFile string
	clock   *testClock
}

func directSetup(t *testing.T, opts ...setupOpt) *directEnv {
	t.Helper()
	env := &directEnv{log: &syncBuffer{}, keyFile: writeKeyFile(t), clock: &testClock{now: time.Now()}}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{
		{AgentID: agentA, InstanceID: instanceA, TokenSHA256: nas.TokenSHA256(tokenA), Delivery: "direct"},
		{AgentID: agentB, InstanceID: instanceB, TokenSHA256: nas.TokenSHA256(tokenB)},
		{AgentID: agentC, InstanceID: instanceC, TokenSHA256: nas.TokenSHA256(tokenC), Delivery: "nas"},
		{AgentID: agentD, InstanceID: instanceD, TokenSHA256: nas.TokenSHA256(tokenD), Delivery: "direct"},
	})
	if err != nil {
		t.Fatal(err)
	}
	all := append([]setupOpt{func(c *nas.Config, o *nas.Options) {
		o.Verifier = agents
		o.Logger = slog.New(slog.NewJSONHandler(env.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.Now = env.clock.Now
		c.Relay.CronKeyEncryptionKeyFile = env.keyFile
		c.Relay.CronKeyMaxAge = time.Hour
	}}, opts...)
	env.bundle = setup(t, all...)
	return env
}

// provisionAs provisions job at fireAt for the agent of token, asking for
// delivery, and returns the answer and its raw body.
func (e *directEnv) provisionAs(token, job string, fireAt time.Time, delivery string) (contract.ProvisionResponse, string) {
	e.t.Helper()
	body := e.provisionBody(job, fireAt)
	body.Delivery = delivery
	rec := e.do(e.public, request{method: http.MethodPost, path: contract.PathProvision, token: token, body: body})
	if rec.Code != http.StatusOK {
		e.t.Fatalf("provision %s (delivery %q): %d %s", job, delivery, rec.Code, rec.Body)
	}
	return decodeBody[contract.ProvisionResponse](e.t, rec), rec.Body.String()
}

// checkDirect fails unless resp carries a well-formed cron key.
func checkDirect(t *testing.T, resp contract.ProvisionResponse, what string) cronkey.Key {
	t.Helper()
	if resp.Delivery != contract.DeliveryDirect {
		t.Fatalf("%s: delivery %q, want direct", what, resp.Delivery)
	}
	k, err := cronkey.Decode(resp.CronKeyID, resp.CronKey)
	if err != nil {
		t.Fatalf("%s: answer's key: %v", what, err)
	}
	return k
}

// rekey re-keys agent through the operator route.
func (e *directEnv) rekey(agent string) contract.AgentRekeyResponse {
	e.t.Helper()
	rec := e.do(e.internal, request{method: http.MethodPost, path: "/api/operator/agents/" + agent + "/rekey", token: opToken})
	if rec.Code != http.StatusOK {
		e.t.Fatalf("rekey %s: %d %s", agent, rec.Code, rec.Body)
	}
	return decodeBody[contract.AgentRekeyResponse](e.t, rec)
}

// TestDirectProvisionAnswersAKeyOnlyToAnAllowedAgent: of four agents that
// ask for direct delivery, the two the agents file allows get a key (each
// its own), the others are armed NAS-mediated and told so; an agent that
// asks for nothing gets the answer it always got; list shows the mode and
// never the key.
func TestDirectProvisionAnswersAKeyOnlyToAnAllowedAgent(t *testing.T) {
	t.Parallel()
	e := directSetup(t)
	at := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	keys := map[string]string{}
	for _, tc := range []struct {
		agent, token string
		direct       bool
	}{
		{agentA, tokenA, true},
		{agentB, tokenB, false},
		{agentC, tokenC, false},
		{agentD, tokenD, true},
	} {
		resp, _ := e.provisionAs(tc.token, "job", at, contract.DeliveryDirect)
		if !tc.direct {
			if resp.Delivery != contract.DeliveryNAS || resp.CronKey != "" || resp.CronKeyID != "" {
				t.Fatalf("%s: answer %+v, want delivery nas and no key", tc.agent, resp)
			}
			o, err := e.engine.Get(context.Background(), tc.agent, "job")
			if err != nil || o.Direct.IsDirect() {
				t.Fatalf("%s: row %+v (%v), want a mediated row", tc.agent, o, err)
			}
			continue
		}
		k := checkDirect(t, resp, tc.agent)
		for other, id := range keys {
			if id == k.ID {
				t.Fatalf("%s got the key of %s", tc.agent, other)
			}
		}
		keys[tc.agent] = k.ID
	}

	// Asking nothing: the answer of old, and a mediated fire.
	_, raw := e.provisionAs(tokenA, "plain", at, "")
	for _, field := range []string{`"delivery"`, `"cron_key"`, `"cron_key_id"`} {
		if strings.Contains(raw, field) {
			t.Fatalf("an answer to a provision without delivery carries %s: %s", field, raw)
		}
	}
	// Asking nas explicitly: told nas.
	if resp, _ := e.provisionAs(tokenA, "mediated", at, contract.DeliveryNAS); resp.Delivery != contract.DeliveryNAS || resp.CronKey != "" {
		t.Fatalf("delivery nas answered %+v", resp)
	}

	rec := e.do(e.public, request{method: http.MethodGet, path: contract.PathList, token: tokenA})
	if rec.Code != http.StatusOK {
		t.Fatalf("list: %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "cron_key") {
		t.Fatalf("list shows a key: %s", rec.Body)
	}
	got := map[string]string{}
	for _, j := range decodeBody[contract.ListResponse](t, rec).Armed {
		got[j.JobID] = j.Delivery
	}
	want := map[string]string{"job": "direct", "plain": "", "mediated": ""}
	for j, d := range want {
		if got[j] != d {
			t.Fatalf("list delivery of %s = %q, want %q (list %v)", j, got[j], d, got)
		}
	}
}

// TestDirectKeyKeptRekeyedAndRetired: the same job provisioned again keeps
// its key (the same fire, or a new fire_at); after the operator re-keys the
// agent, or once the key is older than cron_key_max_age, the next provision
// answers a new key with a new id; a mediated provision and a cancel retire
// it. Re-keying one agent leaves another's keys alone and asks the agent to
// reconcile (reason rekey).
func TestDirectKeyKeptRekeyedAndRetired(t *testing.T) {
	t.Parallel()
	e := directSetup(t)
	recv := newReconcileReceiver(t, e.bundle)
	provision := func(token, job string, at time.Time) cronkey.Key {
		t.Helper()
		body := e.provisionBody(job, at)
		body.Delivery = contract.DeliveryDirect
		body.AgentCallbackURL = recv.srv.URL
		rec := e.do(e.public, request{method: http.MethodPost, path: contract.PathProvision, token: token, body: body})
		if rec.Code != http.StatusOK {
			t.Fatalf("provision %s: %d %s", job, rec.Code, rec.Body)
		}
		return checkDirect(t, decodeBody[contract.ProvisionResponse](t, rec), job)
	}
	at := e.clock.Now().Add(3 * time.Hour).Truncate(time.Second)
	first := provision(tokenA, "job", at)
	otherAgent := provision(tokenD, "job", at)

	if again := provision(tokenA, "job", at); again.ID != first.ID || again.Encoded() != first.Encoded() {
		t.Fatalf("the same fire again: key %s, want %s kept", again.ID, first.ID)
	}
	if next := provision(tokenA, "job", at.Add(time.Minute)); next.ID != first.ID || next.Encoded() != first.Encoded() {
		t.Fatalf("a new fire_at: key %s, want %s kept", next.ID, first.ID)
	}

	// The operator re-keys agent-a: a new key, its instance asked to
	// reconcile; agent-d keeps its own.
	e.clock.Add(time.Millisecond)
	r := e.rekey(agentA)
	if r.AgentID != agentA || r.RekeyedAt.IsZero() {
		t.Fatalf("rekey answered %+v", r)
	}
	select {
	case <-recv.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("no reconcile request reached the agent after the rekey")
	}
	recv.mu.Lock()
	got, errs := recv.got, recv.errs
	recv.mu.Unlock()
	if len(got) != 1 || errs[0] != nil || got[0] != (contract.ReconcileRequest{InstanceID: instanceA, Reason: contract.ReconcileReasonRekey}) {
		t.Fatalf("reconcile requests %+v (errors %v), want one of reason rekey", got, errs)
	}
	e.clock.Add(time.Millisecond)
	rekeyed := provision(tokenA, "job", at.Add(time.Minute))
	if rekeyed.ID == first.ID || rekeyed.Encoded() == first.Encoded() {
		t.Fatalf("after a rekey the key %s was kept", first.ID)
	}
	if again := provision(tokenA, "job", at.Add(time.Minute)); again.ID != rekeyed.ID {
		t.Fatalf("the new key %s was not kept (%s)", rekeyed.ID, again.ID)
	}
	if d := provision(tokenD, "job", at); d.ID != otherAgent.ID {
		t.Fatalf("rekeying agent-a changed agent-d's key %s to %s", otherAgent.ID, d.ID)
	}

	// Past cron_key_max_age (1h here) the next provision mints a new key.
	e.clock.Add(time.Hour + time.Second)
	aged := provision(tokenA, "job", at.Add(time.Minute))
	if aged.ID == rekeyed.ID {
		t.Fatalf("a key older than cron_key_max_age was kept")
	}

	// A cancel drops the key with the row: the job gets a new one after.
	if rec := e.do(e.public, request{method: http.MethodPost, path: contract.PathCancel, token: tokenA, body: contract.CancelRequest{JobID: "job"}}); rec.Code != http.StatusOK {
		t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
	}
	if _, err := e.engine.Get(context.Background(), agentA, "job"); !errors.Is(err, relay.ErrNotFound) {
		t.Fatalf("row after cancel: %v", err)
	}
	if after := provision(tokenA, "job", at.Add(time.Minute)); after.ID == aged.ID {
		t.Fatalf("a cancelled job's key %s came back", aged.ID)
	}

	// A mediated provision retires it too.
	if resp, _ := e.provisionAs(tokenA, "job", at.Add(time.Minute), contract.DeliveryNAS); resp.Delivery != contract.DeliveryNAS {
		t.Fatalf("delivery nas answered %+v", resp)
	}
	if o, err := e.engine.Get(context.Background(), agentA, "job"); err != nil || o.Direct.IsDirect() {
		t.Fatalf("row after a mediated provision %+v (%v)", o.Direct, err)
	}
}

// TestDirectBadInput: an unknown delivery mode is 400 invalid_request and
// arms nothing; a rekey of an agent NAS does not know is 404 not_found, as
// a disable is, and of a malformed id 400.
func TestDirectBadInput(t *testing.T) {
	t.Parallel()
	e := directSetup(t)
	at := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	for _, mode := range []string{"Direct", "relay", "nas,direct", " direct"} {
		body := e.provisionBody("job", at)
		body.Delivery = mode
		rec := e.do(e.public, request{method: http.MethodPost, path: contract.PathProvision, token: tokenA, body: body, invalid: true})
		if rec.Code != http.StatusBadRequest || errCode(t, rec) != contract.CodeInvalidRequest {
			t.Fatalf("delivery %q: %d %s, want 400 invalid_request", mode, rec.Code, rec.Body)
		}
		if _, err := e.engine.Get(context.Background(), agentA, "job"); !errors.Is(err, relay.ErrNotFound) {
			t.Fatalf("delivery %q armed the job: %v", mode, err)
		}
	}
	for _, tc := range []struct {
		name, path, token string
		status            int
		code              string
	}{
		{"unknown agent", "/api/operator/agents/nobody/rekey", opToken, http.StatusNotFound, contract.CodeNotFound},
		{"no operator token", "/api/operator/agents/" + agentA + "/rekey", "", http.StatusUnauthorized, contract.CodeUnauthenticated},
		{"wrong operator token", "/api/operator/agents/" + agentA + "/rekey", "not-the-operator-token", http.StatusForbidden, contract.CodeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := e.do(e.internal, request{method: http.MethodPost, path: tc.path, token: tc.token})
			if rec.Code != tc.status || errCode(t, rec) != tc.code {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tc.status, tc.code)
			}
		})
	}
	// The same answer as disable gives for the unknown agent.
	dis := e.do(e.internal, request{method: http.MethodPost, path: "/api/operator/agents/nobody/disable", token: opToken})
	if dis.Code != http.StatusNotFound || errCode(t, dis) != contract.CodeNotFound {
		t.Fatalf("disable of an unknown agent: %d %s", dis.Code, dis.Body)
	}
	if floor, err := e.engine.RekeyFloor(context.Background(), "nobody"); err != nil || !floor.IsZero() {
		t.Fatalf("a refused rekey set a floor %s (%v)", floor, err)
	}
}

// TestDirectKeyStoredSealedInRedis: on Redis the job's row holds the key
// sealed: neither its base64 forms nor its bytes appear in any key of the
// store, and the sealed form opens under NAS's encryption key only. The
// key appears in no log line either.
func TestDirectKeyStoredSealedInRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eng, err := relayredis.Open(ctx, srv.URL(), relayredis.Options{Prefix: "nas"})
	if err != nil {
		t.Fatalf("open the store: %v", err)
	}
	t.Cleanup(func() { _ = eng.Close() })
	e := directSetup(t, func(_ *nas.Config, o *nas.Options) { o.Engine = eng })
	at := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	var keys []cronkey.Key
	for _, job := range []string{"a", "b", "c"} {
		resp, _ := e.provisionAs(tokenA, job, at, contract.DeliveryDirect)
		keys = append(keys, checkDirect(t, resp, job))
	}
	e.clock.Add(time.Millisecond)
	e.rekey(agentA)
	e.clock.Add(time.Millisecond)
	resp, _ := e.provisionAs(tokenA, "a", at, contract.DeliveryDirect)
	keys = append(keys, checkDirect(t, resp, "a after rekey"))

	rdb := redistest.ClientOf(t, srv.URL())
	names, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var dump bytes.Buffer
	for _, name := range names {
		typ, err := rdb.Type(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case "string":
			v, _ := rdb.Get(ctx, name).Result()
			dump.WriteString(v)
		case "hash":
			m, _ := rdb.HGetAll(ctx, name).Result()
			for k, v := range m {
				dump.WriteString(k + "\x00" + v + "\x00")
			}
		case "zset", "set":
			m, _ := rdb.ZRange(ctx, name, 0, -1).Result()
			if typ == "set" {
				m, _ = rdb.SMembers(ctx, name).Result()
			}
			dump.WriteString(strings.Join(m, "\x00"))
		}
	}
	if dump.Len() == 0 {
		t.Fatal("read nothing from the store")
	}
	for _, k := range keys {
		for _, form := range []string{k.Encoded(), base64.StdEncoding.EncodeToString(k.Secret), base64.RawStdEncoding.EncodeToString(k.Secret), string(k.Secret)} {
			if bytes.Contains(dump.Bytes(), []byte(form)) {
				t.Fatalf("the store holds cron key %s in the clear (%q)", k.ID, form)
			}
		}
	}

	o, err := eng.Get(ctx, agentA, "b")
	if err != nil || !o.Direct.IsDirect() {
		t.Fatalf("row of b: %+v (%v)", o, err)
	}
	mine, err := cronkey.LoadSealer(e.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := mine.Open(agentA, "b", o.Direct.Sealed); err != nil || k.Encoded() != keys[1].Encoded() {
		t.Fatalf("open under NAS's key: %v", err)
	}
	other, err := cronkey.LoadSealer(writeKeyFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(agentA, "b", o.Direct.Sealed); !errors.Is(err, cronkey.ErrOpen) {
		t.Fatalf("the sealed key opened under another encryption key: %v", err)
	}
	if _, err := mine.Open(agentA, "c", o.Direct.Sealed); !errors.Is(err, cronkey.ErrOpen) {
		t.Fatalf("b's sealed key opened as c's: %v", err)
	}

	logs := e.log.String()
	if !strings.Contains(logs, keys[3].ID) {
		t.Fatalf("the log does not name the minted key's id (is the debug log captured?)")
	}
	for _, k := range keys {
		if strings.Contains(logs, k.Encoded()) || strings.Contains(logs, base64.StdEncoding.EncodeToString(k.Secret)) {
			t.Fatalf("a log line holds cron key %s", k.ID)
		}
	}
}

// TestDirectKeyThatNoLongerOpensIsReplaced: a row whose sealed key does not
// open under NAS's encryption key (the key file changed since) gets a new
// key at the next provision, and the answer is the key the row now holds.
func TestDirectKeyThatNoLongerOpensIsReplaced(t *testing.T) {
	t.Parallel()
	e := directSetup(t)
	at := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	resp, _ := e.provisionAs(tokenA, "job", at, contract.DeliveryDirect)
	first := checkDirect(t, resp, "first")
	// The row as an earlier encryption key sealed it.
	old, err := cronkey.LoadSealer(writeKeyFile(t))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := old.Seal(agentA, "job", first)
	if err != nil {
		t.Fatal(err)
	}
	o, err := e.engine.Get(context.Background(), agentA, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.engine.Arm(context.Background(), relay.ArmRequest{AgentID: agentA, InstanceID: instanceA, JobID: "job",
		FireAt: o.FireAt, CallbackURL: o.CallbackURL, ScheduleID: "sch_replaced",
		Direct: relay.DirectKey{Sealed: sealed, KeyID: first.ID, MintedAt: o.Direct.MintedAt}, KeepKeyFrom: o.Direct.MintedAt.Add(time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	resp, _ = e.provisionAs(tokenA, "job", at, contract.DeliveryDirect)
	now := checkDirect(t, resp, "after the key file changed")
	if now.ID == first.ID {
		t.Fatalf("the key that does not open was answered")
	}
	mine, err := cronkey.LoadSealer(e.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	o, err = e.engine.Get(context.Background(), agentA, "job")
	if err != nil {
		t.Fatal(err)
	}
	if k, err := mine.Open(agentA, "job", o.Direct.Sealed); err != nil || k.ID != now.ID || k.Encoded() != now.Encoded() {
		t.Fatalf("the row holds %s (%v), want the answered key %s", o.Direct.KeyID, err, now.ID)
	}
}

// TestDirectPutArmedKeepsTheKey: the bulk armed set carries no delivery
// mode and no key: a direct job listed in it stays direct under the key it
// holds (its next provision answers the same key), and the answer shows
// its mode; a job the set leaves out is cancelled with its key.
func TestDirectPutArmedKeepsTheKey(t *testing.T) {
	t.Parallel()
	e := directSetup(t)
	at := e.clock.Now().Add(time.Hour).Truncate(time.Second)
	resp, _ := e.provisionAs(tokenA, "keep", at, contract.DeliveryDirect)
	kept := checkDirect(t, resp, "keep")
	resp, _ = e.provisionAs(tokenA, "drop", at, contract.DeliveryDirect)
	dropped := checkDirect(t, resp, "drop")
	p := e.provisionBody("keep", at.Add(time.Minute))
	rec := e.do(e.public, request{method: http.MethodPut, path: contract.PathArmed, token: tokenA, body: contract.PutArmedRequest{Armed: []contract.DesiredArm{
		{JobID: p.JobID, FireAt: p.FireAt, AgentCallbackURL: p.AgentCallbackURL, DedupKey: p.DedupKey}}}})
	if rec.Code != http.StatusOK {
		t.Fatalf("put armed: %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "cron_key") {
		t.Fatalf("the bulk answer shows a key: %s", rec.Body)
	}
	put := decodeBody[contract.PutArmedResponse](t, rec)
	if len(put.Armed) != 1 || put.Armed[0].Delivery != contract.DeliveryDirect || len(put.Cancelled) != 1 || put.Cancelled[0] != "drop" {
		t.Fatalf("put armed answered %+v", put)
	}
	resp, _ = e.provisionAs(tokenA, "keep", at.Add(time.Minute), contract.DeliveryDirect)
	if k := checkDirect(t, resp, "keep after the bulk set"); k.ID != kept.ID {
		t.Fatalf("the bulk set changed the key %s to %s", kept.ID, k.ID)
	}
	resp, _ = e.provisionAs(tokenA, "drop", at, contract.DeliveryDirect)
	if k := checkDirect(t, resp, "drop again"); k.ID == dropped.ID {
		t.Fatalf("the key %s of a job the bulk set cancelled came back", dropped.ID)
	}
}
