package sidecar_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// callLog records the method and path of every request a handler serves.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.calls = append(l.calls, r.Method+" "+r.URL.Path)
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

// nonGet returns the calls that were not GETs.
func (l *callLog) nonGet() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.calls {
		if !strings.HasPrefix(c, "GET ") && !strings.HasPrefix(c, "HEAD ") {
			out = append(out, c)
		}
	}
	return out
}

// deadLetter arms job of agent at NAS's store and gives it up, so that NAS
// reports it to the agent as a failed fire.
func deadLetter(t *testing.T, eng relay.Engine, agentID, instanceID, jobID string) string {
	t.Helper()
	ctx := context.Background()
	sch := "sch-" + agentID + "-" + jobID
	if _, err := eng.Arm(ctx, relay.ArmRequest{AgentID: agentID, InstanceID: instanceID, JobID: jobID, FireAt: time.Now().Add(-time.Second),
		CallbackURL: "http://127.0.0.1:1", ScheduleID: sch}); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		ls, err := eng.Claim(ctx, 10, time.Minute, relay.Flow{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			if err := eng.Kill(ctx, l, "agent answered 404"); err != nil {
				t.Fatal(err)
			}
			if l.ScheduleID == sch {
				return sch
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fire %s never claimed", sch)
	return ""
}

// TestStatusLeavesFailedFiresPending: chronos agent status against a NAS
// that reports failed fires (two of this agent's, one of another agent's)
// shows them pending and changes nothing: it makes no call but GETs, NAS
// lists every failed fire again afterwards, and the agent's ledger records
// no missed run.
func TestStatusLeavesFailedFiresPending(t *testing.T) {
	t.Parallel()
	const tokenA, tokenB = "agent-a-status-token", "agent-b-status-token"
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	key, err := nas.GenerateKey(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	set, err := nas.NewKeySet([]*nas.SigningKey{key}, "", nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{
		{AgentID: "agent-a", InstanceID: "inst-a", TokenSHA256: nas.TokenSHA256(tokenA)},
		{AgentID: "agent-b", InstanceID: "inst-b", TokenSHA256: nas.TokenSHA256(tokenB)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var log callLog
	var h http.Handler
	srv := httptest.NewServer(log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) })))
	t.Cleanup(srv.Close)
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: srv.URL, Relay: nas.RelayConfig{Secrets: []string{secret}}, AllowPrivateCallbacks: true},
		Engine: eng, Verifier: agents, Keys: nas.NewKeyRing(set), Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	h = nashttp.NewServer(svc, nashttp.Options{Logger: quiet()}).Handler()

	deadLetter(t, eng, "agent-a", "inst-a", "nightly")
	deadLetter(t, eng, "agent-a", "inst-a", "hourly")
	deadLetter(t, eng, "agent-b", "inst-b", "nightly")

	cfg := builtinConfig(t)
	cfg.Cron = provider.CronConfig{Provider: provider.Chronos, Chronos: provider.ChronosConfig{
		PortalURL: srv.URL, CallbackURL: "http://127.0.0.1:1", NASJWKSURL: srv.URL + contract.PathJWKS,
		ExpectedAudience: "agent:inst-a", AccessToken: tokenA,
	}}
	ctx := context.Background()
	rt, err := agent.Open(ctx, agent.Config{Home: cfg.Home})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"nightly", "hourly"} {
		if _, _, err := rt.AddJob(ctx, agent.JobSpec{ID: id, Schedule: "0 3 * * *",
			Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		report, err := sidecar.Status(ctx, sidecar.StatusOptions{Config: cfg, Fires: 5})
		if err != nil {
			t.Fatal(err)
		}
		if report.NAS == nil {
			t.Fatalf("status %d: NAS not asked: %s", i, report.NASError)
		}
		if len(report.NAS.FailedFires) != 2 || !slices.ContainsFunc(report.Summary(), func(l sidecar.Line) bool {
			return l.Label == "failed fires" && strings.HasPrefix(l.Text, "2 at NAS not yet recorded")
		}) {
			t.Fatalf("status %d shows failed fires %+v, summary %+v", i, report.NAS.FailedFires, report.Summary())
		}
		if len(report.LastFires) != 0 {
			t.Fatalf("status %d recorded runs: %+v", i, report.LastFires)
		}
	}
	if calls := log.nonGet(); len(calls) != 0 {
		t.Fatalf("status called NAS with %v", calls)
	}
	for agentID, want := range map[string]int{"agent-a": 2, "agent-b": 1} {
		failed, err := eng.ListFailed(ctx, agentID, 0, 0)
		if err != nil || len(failed) != want {
			t.Fatalf("%s's failed fires after status: %d, %v; want %d pending", agentID, len(failed), err, want)
		}
	}
	rt, err = agent.Open(ctx, agent.Config{Home: cfg.Home})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	if runs, err := rt.Ledger().Runs(ctx, ledger.Filter{}); err != nil || len(runs) != 0 {
		t.Fatalf("status wrote the ledger: %+v, %v", runs, err)
	}
}
