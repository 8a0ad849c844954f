package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/clockskew"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// skewEngines open the relay engines the skew test runs NAS on: the
// embedded one and Redis.
var skewEngines = []struct {
	name string
	open func(t *testing.T) relay.Engine
}{
	{"memory", func(*testing.T) relay.Engine { return memory.New(memory.Options{}) }},
	{"redis", func(t *testing.T) relay.Engine {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e, err := relayredis.Open(ctx, redistest.URL(t), relayredis.Options{Prefix: redistest.Prefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}},
}

// startNASWithRelay serves a NAS on eng that knows one agent, with a relay
// dispatcher in its process delivering the armed fires (NAS's own delivery
// path: token minting, the agent's answer classified, retries and dead
// letters). It returns NAS's URL; it closes eng when the test ends.
func startNASWithRelay(t *testing.T, eng relay.Engine, token, instance string) string {
	t.Helper()
	ln := listener(t)
	url := "http://" + ln.Addr().String()
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
	cfg := nas.Config{PublicURL: url, Relay: nas.RelayConfig{Secrets: []string{secret}}, AllowPrivateCallbacks: true}
	svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents, Keys: nas.NewKeyRing(set), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	dcfg := cfg.Relay.Dispatch()
	dcfg.Logger = quiet()
	disp := relay.NewDispatcher(eng, svc.LocalDeliverer(), dcfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = disp.Run(ctx) }()
	srv := &http.Server{Handler: nashttp.NewServer(svc, nashttp.Options{Logger: quiet()}).Handler()}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		cancel()
		<-done
		svc.Close()
		_ = eng.Close()
	})
	return url
}

// TestRunFollowsNASClock: with the host's clock 2 minutes behind or ahead
// of NAS's, every fire of an every-2s job is delivered by NAS's relay at
// its slot and run, none refused or dead-lettered, and the skew is on the
// agent's /metrics and in `chronos agent status`; with NAS on the embedded
// engine and on Redis.
func TestRunFollowsNASClock(t *testing.T) {
	t.Parallel()
	for _, shift := range []time.Duration{-2 * time.Minute, 2 * time.Minute} {
		for _, store := range skewEngines {
			t.Run(fmt.Sprintf("%s host clock %s", store.name, shift), func(t *testing.T) {
				t.Parallel()
				testFollowsNASClock(t, store.open(t), shift)
			})
		}
	}
}

// testFollowsNASClock runs TestRunFollowsNASClock's check on eng with the
// host's clock shift away from NAS's.
func testFollowsNASClock(t *testing.T, eng relay.Engine, shift time.Duration) {
	token, instance := "agent-skew-token", "inst-skew"
	nasURL := startNASWithRelay(t, eng, token, instance)
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
	if _, _, err := rt.AddJob(bg, agent.JobSpec{ID: "tick", Schedule: "every 2s",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}}}); err != nil {
		t.Fatal(err)
	}
	defer rt.Close(bg)

	n := newNotifier()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	hostClock := func() time.Time { return time.Now().Add(shift) }
	done := start(ctx, sidecar.Options{Config: cfg, Logger: slog.New(slog.DiscardHandler), Listener: ln, Notifier: n, Now: hostClock})
	n.awaitReady(t, done)

	runs := waitRuns(t, rt.Ledger(), 4, 20*time.Second)
	for i, r := range runs {
		if r.State != ledger.StateSucceeded || r.Trigger != string(agent.TriggerScheduled) {
			t.Errorf("slot %s: %s (%s), trigger %q", r.Slot, r.State, r.Reason, r.Trigger)
		}
		if r.LatenessMS < -1500 || r.LatenessMS > 3000 {
			t.Errorf("slot %s ran %d ms after it", r.Slot, r.LatenessMS)
		}
		if i > 0 && !r.Slot.Equal(runs[i-1].Slot.Add(2*time.Second)) {
			t.Errorf("slots %s then %s: a fire is missing", runs[i-1].Slot, r.Slot)
		}
	}

	page := get(t, "http://"+ln.Addr().String()+contract.PathMetrics)
	skew, ok := metric(page, "chronos_agent_clock_skew_seconds")
	if want := -shift.Seconds(); !ok || skew < want-1.5 || skew > want+1.5 {
		t.Errorf("chronos_agent_clock_skew_seconds %v (present %v), want about %v", skew, ok, want)
	}
	if v, _ := metric(page, `chronos_agent_fires_total{outcome="unauthorized"}`); v != 0 {
		t.Errorf("%v fires refused as unauthorized", v)
	}
	dead, _, err := eng.ListDead(bg, "agent-a", "", 100)
	if err != nil || len(dead) != 0 {
		t.Errorf("dead letters %+v, %v", dead, err)
	}

	report, err := sidecar.Status(ctx, sidecar.StatusOptions{Config: cfg, Now: hostClock})
	if err != nil {
		t.Fatal(err)
	}
	if c := report.ClockSkew; c == nil || c.Seconds < -shift.Seconds()-1.5 || c.Seconds > -shift.Seconds()+1.5 {
		t.Errorf("status clock skew %+v, want about %v s", c, -shift.Seconds())
	}
	if !slices.ContainsFunc(report.Summary(), func(l sidecar.Line) bool {
		return l.Label == "clock" && strings.HasPrefix(l.Text, clockskew.Direction(-shift)+" by ")
	}) {
		t.Errorf("status summary says nothing of the clock: %+v", report.Summary())
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Fatal(err)
	}
}

// waitRuns waits until lg holds at least n ended runs of job tick, and
// returns them oldest first.
func waitRuns(t *testing.T, lg *ledger.Ledger, n int, within time.Duration) []ledger.Run {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		all, err := lg.Runs(context.Background(), ledger.Filter{JobID: "tick"})
		if err != nil {
			t.Fatal(err)
		}
		var ended []ledger.Run
		for _, r := range all {
			if r.State.Terminal() {
				ended = append(ended, r)
			}
		}
		if len(ended) >= n {
			slices.SortFunc(ended, func(a, b ledger.Run) int { return a.Slot.Compare(b.Slot) })
			return ended
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs of tick ended within %s, want %d: %+v", len(ended), within, n, all)
		}
		time.Sleep(100 * time.Millisecond) // polling the ledger a process writes
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metric returns the value of the sample name (with labels, as printed).
func metric(page, name string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
