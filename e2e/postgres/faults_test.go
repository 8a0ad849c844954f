package postgrese2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/pgtest"
	relaypostgres "github.com/chronoscron/chronos/relay/postgres"
)

// relayOnly is the relay: section of a NAS that leaves delivery to relay
// processes.
const relayOnly = "  dispatchers: 0\n"

// faultBurst is the size of the fault tests' bursts and the time they are
// due over.
func faultBurst() (int, time.Duration) {
	if soak() {
		return 20000, 10 * time.Second
	}
	return 3000, 3 * time.Second
}

// outageProbe is the provision an agent sends while the database is
// away, due in an hour.
func outageProbe(a agentCred) contract.ProvisionRequest {
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	return provisionBody(fire{agent: a.id, job: "outage-probe", fireAt: at}, "http://127.0.0.1:9/cb")
}

// checkUnavailable sends req as agent a to nasURL while the database is
// away: the answer must be 503 store_unavailable, with a Retry-After,
// within 2 seconds.
func checkUnavailable(t *testing.T, nasURL string, a agentCred, req contract.ProvisionRequest, while string) {
	t.Helper()
	// An answer later than 5 s fails anyway; waiting longer would only
	// lengthen the outage.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	code, retryAfter, body, took, err := post(ctx, &http.Client{Timeout: 5 * time.Second}, nasURL+contract.PathProvision, a.token, req)
	if err != nil {
		t.Errorf("provision while %s: %v", while, err)
		return
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"error":"store_unavailable"`) {
		t.Errorf("provision while %s: %d %s, want 503 store_unavailable", while, code, body)
		return
	}
	if retryAfter == "" || took > 2*time.Second {
		t.Errorf("provision while %s answered after %s with Retry-After %q, want within 2s with one", while, took.Round(time.Millisecond), retryAfter)
	}
}

// repeatProbe repeats an outage probe once the database is back, as the
// agent would after its Retry-After (again after each 503, for up to 10
// seconds): it is armed, once (a write NAS gave up on may have been applied
// when the database resumed), and the agent then cancels it.
func repeatProbe(t *testing.T, e *relaypostgres.Engine, nasURL string, a agentCred, req contract.ProvisionRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 30 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	code, retryAfter, body, _, err := post(ctx, client, nasURL+contract.PathProvision, a.token, req)
	for refused := 1; err == nil && code == http.StatusServiceUnavailable && time.Now().Before(deadline); refused++ {
		t.Logf("provision repeated after the outage: 503 (%d), Retry-After %s", refused, retryAfter)
		wait, _ := strconv.Atoi(retryAfter)
		time.Sleep(time.Duration(max(wait, 1)) * time.Second) // the agent honours Retry-After
		code, retryAfter, body, _, err = post(ctx, client, nasURL+contract.PathProvision, a.token, req)
	}
	if err != nil || code != http.StatusOK {
		t.Fatalf("provision repeated after the outage: %d %s %v", code, body, err)
	}
	var got contract.ProvisionResponse
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("provision answer %s: %v", body, err)
	}
	items, _, err := e.List(ctx, a.id, "", 1000)
	n := 0
	for _, it := range items {
		if it.JobID == req.JobID {
			n++
			if it.ScheduleID != got.ScheduleID {
				t.Errorf("armed %s is schedule %s, the repeat answered %s", req.JobID, it.ScheduleID, got.ScheduleID)
			}
		}
	}
	if err != nil || n != 1 {
		t.Fatalf("after the repeat %s is armed %d times (%v); want once", req.JobID, n, err)
	}
	code, _, body, _, err = post(ctx, client, nasURL+contract.PathCancel, a.token, contract.CancelRequest{JobID: req.JobID})
	if err != nil || code != http.StatusOK {
		t.Fatalf("cancel %s: %d %s %v", req.JobID, code, body, err)
	}
}

// TestKillRelayAndNASDuringDelivery runs two NAS and three relay processes on
// one PostgreSQL schema, arms fires due within a few seconds through the
// agent API, and SIGKILLs a relay (for good) and a NAS (restarted, as a
// supervisor would) at random points of the burst's delivery. Every fire
// reaches its agent, every slot is claimed once, and once the leases of the
// killed processes have lapsed nothing is left in the store.
//
// The fault tests run one at a time: each loads both cores on its own.
func TestKillRelayAndNASDuringDelivery(t *testing.T) {
	n, spread := faultBurst()
	const lease = 2 * time.Second
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 20)
	_, url1 := c.startNAS("nas-1", relayOnly) // migrates the schema before the others start
	nas2, url2 := c.startNAS("nas-2", relayOnly)
	relays := []*proc{
		c.startRelay("relay-a", "nas-1", lease),
		c.startRelay("relay-b", "nas-2", lease),
		c.startRelay("relay-c", "nas-1", lease),
	}
	s := startSink(t, fetchJWKS(t, url1))
	e := openStore(t, store)

	// The faults: when a random tenth to two thirds of the fires have
	// arrived, kill relay-a for good, and kill nas-2, which comes back
	// 300–800 ms later.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	killRelayAfter := n/10 + rng.IntN(n*2/3-n/10)
	killNASAfter := n/10 + rng.IntN(n*2/3-n/10)
	nasDown := 300*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))
	first := time.Now().Add(3 * time.Second)
	fires := plan(c.agents, n, first, spread)
	t.Logf("%d fires from %s over %s; relay-a killed after %d arrived, nas-2 after %d, for %s",
		n, first.Format("15:04:05.000"), spread, killRelayAfter, killNASAfter, nasDown.Round(time.Millisecond))
	var chaos sync.WaitGroup
	chaos.Go(func() {
		if s.waitFor(time.Minute, s.arrived(killRelayAfter)) {
			relays[0].kill()
		}
	})
	chaos.Go(func() {
		if s.waitFor(time.Minute, s.arrived(killNASAfter)) {
			nas2.kill()
			time.Sleep(nasDown) // the supervisor's restart delay
			nas2.restart()
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acked := armAll(ctx, t, []string{url1, url2}, c, s, fires, 16, nil)
	armed := time.Now()
	chaos.Wait()
	within := 45 * time.Second
	if soak() {
		within = 3 * time.Minute
	}
	s.mustArrive(t, e, n, within)
	slots, arrivals := s.counts()
	t.Logf("arming ended %s after the first fire_at; all %d slots arrived %s after the last fire_at; %d arrivals (%d repeats)",
		armed.Sub(first).Round(time.Millisecond), slots, time.Since(fires[n-1].fireAt).Round(time.Millisecond), arrivals, arrivals-slots)
	checkDelivered(t, s, fires, acked)
	// The killed relay's leases lapse after `lease`; the survivors' reapers
	// return them, and they are delivered and acked.
	waitEmpty(t, e, 3*lease+5*time.Second)
}

// TestPostgresRestartDuringBurst stops PostgreSQL (pg_ctl stop in fast
// mode, on a cluster of its own) twice under a NAS and a relay process,
// once when a third of a burst is armed through the agent API and once when
// half of it has been delivered, and starts it again: while it is down
// provision answers 503 store_unavailable within 2 s, and every arm NAS
// acknowledged reaches its agent and is claimed once.
func TestPostgresRestartDuringBurst(t *testing.T) {
	burstThroughRestarts(t, pgtest.Fast, true)
}

// TestPostgresCrashDuringBurst is TestPostgresRestartDuringBurst with
// PostgreSQL stopped in immediate mode (no checkpoint: the start recovers
// from the write-ahead log, as after a crash; connections end mid-reply):
// while it is down provision answers 503 store_unavailable within 2 s, and
// every arm NAS acknowledged reaches its agent and is claimed once.
func TestPostgresCrashDuringBurst(t *testing.T) {
	burstThroughRestarts(t, pgtest.Immediate, true)
}

// burstThroughRestarts arms a burst through one NAS, delivered by one relay
// process, on a PostgreSQL of its own that it stops in mode and starts
// again when a third of the burst is armed and when half of it has
// arrived. With probe, a provision sent while the server is down must be
// answered 503 store_unavailable within 2 s, and succeed once repeated.
func burstThroughRestarts(t *testing.T, mode pgtest.StopMode, probe bool) {
	n, spread := faultBurst()
	const lease = 2 * time.Second
	srv := pgtest.Start(t)
	store := storeOn(t, srv.URL())
	c := newCluster(t, store, 10)
	_, url := c.startNAS("nas", relayOnly)
	c.startRelay("relay", "nas", lease)
	s := startSink(t, fetchJWKS(t, url))

	// bounce stops the server, probes the agent API and holds the server
	// down at least 500 ms before starting it again.
	req := outageProbe(c.agents[0])
	bounce := func(while string) {
		stopped := time.Now()
		if err := srv.Stop(mode); err != nil {
			t.Errorf("stop -m %s while %s: %v", mode, while, err)
		}
		if probe {
			checkUnavailable(t, url, c.agents[0], req, "PostgreSQL is stopped ("+while+")")
		}
		time.Sleep(time.Until(stopped.Add(500 * time.Millisecond))) // the outage's length
		if err := srv.Start(); err != nil {
			t.Errorf("start after stop -m %s while %s: %v", mode, while, err)
		}
		got, _ := s.counts()
		t.Logf("PostgreSQL stopped -m %s and started while %s (%d of %d arrived)", mode, while, got, n)
	}
	armedThird := make(chan struct{})
	var faults sync.WaitGroup
	faults.Go(func() {
		<-armedThird
		bounce("arming")
		if s.waitFor(time.Minute, s.arrived(n/2)) {
			bounce("delivering")
		}
	})
	first := time.Now().Add(3 * time.Second)
	fires := plan(c.agents, n, first, spread)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acked := armAll(ctx, t, []string{url}, c, s, fires, 8, func(acked int) {
		if acked == n/3 {
			close(armedThird)
		}
	})
	faults.Wait()
	e := openStore(t, store)
	if probe {
		repeatProbe(t, e, url, c.agents[0], req)
	}
	s.mustArrive(t, e, n, 45*time.Second)
	checkDelivered(t, s, fires, acked)
	waitEmpty(t, e, 3*lease+5*time.Second)
	if t.Failed() {
		t.Logf("--- PostgreSQL's log (end):\n%s", srv.LogTail())
	}
}
