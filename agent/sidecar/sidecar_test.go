package sidecar_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay/memory"
)

// notifier records what Run tells the service manager.
type notifier struct {
	ready    chan func(context.Context) error
	stopping chan struct{}
}

func newNotifier() *notifier {
	return &notifier{ready: make(chan func(context.Context) error, 1), stopping: make(chan struct{}, 1)}
}

func (n *notifier) Ready(_ context.Context, _ *slog.Logger, alive func(context.Context) error) {
	n.ready <- alive
}

func (n *notifier) Stopping(*slog.Logger) { n.stopping <- struct{}{} }

// awaitReady returns the alive check handed to Ready.
func (n *notifier) awaitReady(t *testing.T, done <-chan error) func(context.Context) error {
	t.Helper()
	select {
	case alive := <-n.ready:
		return alive
	case err := <-done:
		t.Fatalf("Run returned before ready: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("never ready")
	}
	return nil
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func listener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// start runs the agent in the background; the returned channel gets Run's
// result.
func start(ctx context.Context, o sidecar.Options) <-chan error {
	done := make(chan error, 1)
	go func() { done <- sidecar.Run(ctx, o) }()
	return done
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	return nil
}

func builtinConfig(t *testing.T) provider.Config {
	return provider.Config{Home: filepath.Join(t.TempDir(), "home"), Listen: "127.0.0.1:0"}
}

// TestRunBuiltin: under the built-in timer the agent serves its routes,
// is ready once serving, feeds the watchdog only while the store can be
// written, and at a signal says it is stopping and records that it stopped.
func TestRunBuiltin(t *testing.T) {
	t.Parallel()
	cfg := builtinConfig(t)
	ln := listener(t)
	n := newNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, sidecar.Options{Config: cfg, Logger: quiet(), Listener: ln, Notifier: n})
	alive := n.awaitReady(t, done)

	base := "http://" + ln.Addr().String()
	resp, err := http.Get(base + contract.PathHealthz)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	resp, err = http.Post(base+contract.PathFire, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("fire without a token: %d, want 401", resp.StatusCode)
	}
	if err := alive(ctx); err != nil {
		t.Fatalf("healthy agent reported %v", err)
	}
	st, err := provider.ReadState(cfg.Home)
	if err != nil || st.Agent == nil || st.Agent.Provider != provider.Builtin || st.Agent.StoppedAt != nil || st.Agent.Listen != ln.Addr().String() {
		t.Fatalf("state while serving: %+v, %v", st.Agent, err)
	}

	// A ledger directory that is no directory makes the store unwritable.
	ledgerDir := filepath.Join(cfg.Home, "runs")
	if err := os.RemoveAll(ledgerDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ledgerDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(ctx) == nil { // the probe's result is kept for a second
		if time.Now().After(deadline) {
			t.Fatal("the watchdog is still fed with an unwritable store")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := os.Remove(ledgerDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ledgerDir, 0o700); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.stopping:
	default:
		t.Fatal("stopping was not notified")
	}
	st, err = provider.ReadState(cfg.Home)
	if err != nil || st.Agent == nil || st.Agent.StoppedAt == nil {
		t.Fatalf("state after stop: %+v, %v", st.Agent, err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener is still open after Run returned")
	}
}

// TestRunIdleExit: under NAS, with nothing to do, the agent exits by
// itself after the idle period, saying it stops; on the built-in timer,
// its jobs' only trigger, it never idles out and says so.
func TestRunIdleExit(t *testing.T) {
	t.Parallel()
	t.Run("chronos", func(t *testing.T) {
		t.Parallel()
		const token, instance = "agent-i-token", "inst-i"
		nasURL := startNAS(t, token, instance)
		ln := listener(t)
		cfg := builtinConfig(t)
		cfg.Cron = provider.CronConfig{Provider: provider.Chronos, Chronos: provider.ChronosConfig{
			PortalURL: nasURL, CallbackURL: "http://" + ln.Addr().String(), NASJWKSURL: nasURL + contract.PathJWKS,
			ExpectedAudience: "agent:" + instance, AccessToken: token,
		}}
		n := newNotifier()
		start := time.Now()
		err := sidecar.Run(context.Background(), sidecar.Options{
			Config: cfg, Logger: quiet(), Listener: ln, Notifier: n, IdleExit: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 100*time.Millisecond {
			t.Fatalf("exited after %s", d)
		}
		if len(n.stopping) != 1 {
			t.Fatal("stopping was not notified")
		}
	})
	t.Run("builtin", func(t *testing.T) {
		t.Parallel()
		var logs lockedBuffer
		n := newNotifier()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := start(ctx, sidecar.Options{Config: builtinConfig(t), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			Listener: listener(t), Notifier: n, IdleExit: time.Millisecond})
		n.awaitReady(t, done)
		if !strings.Contains(logs.String(), "idle exit is off on the built-in timer") {
			t.Fatalf("no warning that idle exit is off:\n%s", logs.String())
		}
		// Ready came after the idle clock would have started: an agent
		// that idled out would be gone by now, its done channel closed.
		select {
		case err := <-done:
			t.Fatalf("the agent on the built-in timer exited by itself: %v", err)
		default:
		}
		cancel()
		if err := wait(t, done); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRunRefusesANamedProviderItCannotUse: cron.provider: chronos with a
// setting missing, or an unknown provider, fails the start naming what is
// wrong, instead of running on the built-in timer.
func TestRunRefusesANamedProviderItCannotUse(t *testing.T) {
	t.Parallel()
	missingJWKS := builtinConfig(t)
	missingJWKS.Cron = provider.CronConfig{Provider: provider.Chronos, Chronos: provider.ChronosConfig{
		PortalURL: "http://nas.test", CallbackURL: "http://agent.test", ExpectedAudience: "agent:i", AccessToken: "t",
	}}
	unknown := builtinConfig(t)
	unknown.Cron.Provider = "chronoss"
	for name, tc := range map[string]struct {
		cfg  provider.Config
		want string
	}{
		"chronos without nas_jwks_url": {missingJWKS, "cron.chronos.nas_jwks_url is missing"},
		"unknown provider":             {unknown, `cron.provider "chronoss" is not known`},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := sidecar.Run(ctx, sidecar.Options{Config: tc.cfg, Logger: quiet(), Listener: listener(t), Notifier: newNotifier(), IdleExit: time.Second})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "cron.provider: builtin") {
				t.Fatalf("Run = %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
}

// TestRunRefusesBadOptions: bad options fail before anything starts.
func TestRunRefusesBadOptions(t *testing.T) {
	t.Parallel()
	tz := builtinConfig(t)
	tz.Timezone = "Mars/Olympus"
	open := builtinConfig(t)
	open.UIListen = "0.0.0.0:0" // not loopback, and no ui_token_file
	for name, o := range map[string]sidecar.Options{
		"negative idle exit":           {Config: builtinConfig(t), IdleExit: -time.Second},
		"unknown zone":                 {Config: tz},
		"ui_listen open without token": {Config: open},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o.Logger, o.Notifier = quiet(), newNotifier()
			if err := sidecar.Run(context.Background(), o); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(o.Config.Home); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("home created: %v", err)
			}
		})
	}
}

// startNAS serves a NAS on the embedded engine that knows one agent.
func startNAS(t *testing.T, token, instance string) string {
	t.Helper()
	ln := listener(t)
	url := "http://" + ln.Addr().String()
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
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "agent-a", InstanceID: instance, TokenSHA256: nas.TokenSHA256(token)}})
	if err != nil {
		t.Fatal(err)
	}
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: url, Relay: nas.RelayConfig{Secrets: []string{secret}}, AllowPrivateCallbacks: true},
		Engine: eng, Verifier: agents, Keys: nas.NewKeyRing(set), Logger: quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	h := nashttp.NewServer(svc, nashttp.Options{Logger: quiet()}).Handler()
	// NAS answers the agent API slowly, so that a readiness that does not
	// wait for the first reconcile is seen.
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != contract.PathJWKS {
			time.Sleep(300 * time.Millisecond)
		}
		h.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: slow}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return url
}

// countingVerifier counts the fire tokens it is asked about.
type countingVerifier struct {
	agenthttp.FireVerifier
	n *atomic.Int64
}

func (c countingVerifier) VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error {
	c.n.Add(1)
	return c.FireVerifier.VerifyFire(ctx, token, body, req)
}

// TestRunChronos: under the chronos provider the agent is ready only once
// its first reconcile has armed the job at NAS, and fire tokens go through
// the wrapped verifier.
func TestRunChronos(t *testing.T) {
	t.Parallel()
	const token, instance = "agent-a-token", "inst-a"
	nasURL := startNAS(t, token, instance)
	ln := listener(t)
	cfg := builtinConfig(t)
	cfg.Cron = provider.CronConfig{Provider: provider.Chronos, Chronos: provider.ChronosConfig{
		PortalURL: nasURL, CallbackURL: "http://" + ln.Addr().String(), NASJWKSURL: nasURL + contract.PathJWKS,
		ExpectedAudience: "agent:" + instance, AccessToken: token,
	}}
	if d := provider.Decide(cfg); !d.Chronos() {
		t.Fatalf("decision %+v", d)
	}
	rt, err := agent.Open(context.Background(), agent.Config{Home: cfg.Home})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rt.AddJob(context.Background(), agent.JobSpec{ID: "nightly", Schedule: "0 3 * * *",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	var verified atomic.Int64
	n := newNotifier()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := start(ctx, sidecar.Options{Config: cfg, Logger: quiet(), Listener: ln, Notifier: n,
		WrapVerifier: func(v agenthttp.FireVerifier) agenthttp.FireVerifier { return countingVerifier{v, &verified} }})
	n.awaitReady(t, done)

	st, err := provider.ReadState(cfg.Home)
	if err != nil || st.Last == nil || !st.Last.OK || len(st.Last.Provisioned) != 1 {
		t.Fatalf("ready before the first reconcile armed the job: %+v, %v", st.Last, err)
	}
	report, err := sidecar.Status(ctx, sidecar.StatusOptions{Config: cfg, Fires: 5})
	if err != nil {
		t.Fatal(err)
	}
	if report.InSync == nil || !*report.InSync || len(report.NAS.Armed) != 1 || !report.Running || report.JWKS == nil || !report.JWKS.Reachable {
		t.Fatalf("status %+v", report)
	}
	if rows := report.PlanRows(); len(rows) != 1 || rows[0].JobID != "nightly" || rows[0].State != "armed" {
		t.Fatalf("plan rows %+v", rows)
	}

	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+contract.PathFire,
		strings.NewReader(`{"job_id":"nightly","fire_at":"2030-01-01T03:00:00Z"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer not.a.token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || verified.Load() != 1 {
		t.Fatalf("forged fire: %d, verifier asked %d times", resp.StatusCode, verified.Load())
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
}

// TestRunChronosRecordsPausedSlots: under NAS nothing fires a paused job,
// yet every slot it lets pass is recorded skipped with reason paused while
// the agent serves; the config it was started with is recorded in the home.
func TestRunChronosRecordsPausedSlots(t *testing.T) {
	t.Parallel()
	const token, instance = "agent-p-token", "inst-p"
	nasURL := startNAS(t, token, instance)
	ln := listener(t)
	cfg := builtinConfig(t)
	cfg.Cron = provider.CronConfig{Provider: provider.Chronos, Chronos: provider.ChronosConfig{
		PortalURL: nasURL, CallbackURL: "http://" + ln.Addr().String(), NASJWKSURL: nasURL + contract.PathJWKS,
		ExpectedAudience: "agent:" + instance, AccessToken: token,
	}}
	bg := context.Background()
	rt, err := agent.Open(bg, agent.Config{Home: cfg.Home})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(bg)
	if _, _, err := rt.AddJob(bg, agent.JobSpec{ID: "tick", Schedule: "every 1s",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Pause(bg, "tick", "maintenance"); err != nil {
		t.Fatal(err)
	}
	configPath := filepath.Join(t.TempDir(), "agent.yaml")
	n := newNotifier()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	done := start(ctx, sidecar.Options{Config: cfg, Logger: quiet(), Listener: ln, Notifier: n,
		ConfigPath: configPath, PausedSweep: 100 * time.Millisecond})
	n.awaitReady(t, done)

	if rec, ok, err := provider.ReadServing(cfg.Home); err != nil || !ok || rec.Config != configPath {
		t.Fatalf("serving record %+v, %v, %v; want config %s", rec, ok, err, configPath)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		es, err := rt.Ledger().Entries(bg, ledger.Filter{JobID: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		skipped := 0
		for _, e := range es {
			switch {
			case e.State == ledger.StateSkipped && strings.HasPrefix(e.Reason, agent.ReasonPaused):
				skipped++
			case e.State != ledger.StateSkipped:
				t.Fatalf("a paused job left %s (%s)", e.State, e.Reason)
			}
		}
		if skipped >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d paused slots recorded after 15 s of an every-1s job", skipped)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
}
