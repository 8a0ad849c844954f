package redise2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
)

// plan spreads n fires over agents, due from first over spread.
func plan(agents []agentCred, n int, first time.Time, spread time.Duration) []fire {
	fires := make([]fire, n)
	for i := range fires {
		fires[i] = fire{
			agent:  agents[i%len(agents)].id,
			job:    fmt.Sprintf("job-%06d", i),
			fireAt: first.Add(time.Duration(int64(spread) * int64(i) / int64(n))).Truncate(time.Millisecond),
		}
	}
	return fires
}

// byID indexes agents by id.
func byID(agents []agentCred) map[string]agentCred {
	m := map[string]agentCred{}
	for _, a := range agents {
		m[a.id] = a
	}
	return m
}

// checkDelivered fails the test unless every acknowledged fire reached the
// sink, every token verified, none arrived early and every slot was
// accepted exactly once.
func checkDelivered(t *testing.T, s *sink, fires []fire, acked []bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	missing := 0
	for i, f := range fires {
		if !acked[i] {
			continue
		}
		key := slot(f.agent, f.job, f.fireAt)
		if s.arrivals[key] == 0 {
			if missing < 5 {
				t.Errorf("acknowledged fire %s (schedule %s) never reached the agent", key, f.scheduleID)
			}
			missing++
		}
		if s.accepted[key] > 1 {
			t.Errorf("slot %s accepted %d times", key, s.accepted[key])
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged fires lost", missing)
	}
	if n := s.failed.Load(); n > 0 {
		t.Fatalf("%d fire tokens failed verification", n)
	}
	if n := s.early.Load(); n > 0 {
		t.Fatalf("%d fires arrived before their fire_at", n)
	}
}

// TestKillRelayAndNASDuringDelivery runs two NAS and three relay processes on
// one Redis, arms fires due within a few seconds through the agent API, and
// SIGKILLs a relay (for good) and a NAS (restarted, as a supervisor would) at
// random moments while they are delivered. Every fire reaches the agent at
// least once, every slot is accepted once, and once the reaper's window has
// passed nothing is left in a lease.
//
// The fault tests run one at a time: each loads both cores on its own.
func TestKillRelayAndNASDuringDelivery(t *testing.T) {
	n, spread := 10000, 3*time.Second
	if soak() {
		n, spread = 50000, 10*time.Second
	}
	const lease = 2 * time.Second
	store := redistest.URL(t) + "/0?prefix=" + redistest.Prefix(t)
	c := newCluster(t, store, 20)
	nas1, url1 := c.startNAS("nas-1")
	nas2, url2 := c.startNAS("nas-2")
	_ = nas1
	relays := []*proc{
		c.startRelay("relay-a", "nas-1", lease),
		c.startRelay("relay-b", "nas-2", lease),
		c.startRelay("relay-c", "nas-1", lease),
	}
	s := startSink(t, fetchJWKS(t, url1))
	e := openStore(t, store)

	first := time.Now().Add(3 * time.Second)
	fires := plan(c.agents, n, first, spread)
	acked := make([]bool, n)
	var mu sync.Mutex

	// The faults: at random moments within the delivery window, kill
	// relay-a for good and kill nas-2, which comes back 300–800 ms later.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 6))
	killRelayAt := first.Add(time.Duration(rng.Int64N(int64(spread))))
	killNASAt := first.Add(time.Duration(rng.Int64N(int64(spread))))
	nasDown := 300*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))
	t.Logf("%d fires from %s over %s; relay-a killed at +%s, nas-2 killed at +%s for %s",
		n, first.Format("15:04:05.000"), spread, killRelayAt.Sub(first), killNASAt.Sub(first), nasDown)
	var chaos sync.WaitGroup
	chaos.Go(func() {
		time.Sleep(time.Until(killRelayAt))
		relays[0].kill()
	})
	chaos.Go(func() {
		time.Sleep(time.Until(killNASAt))
		nas2.kill()
		time.Sleep(nasDown)
		nas2.restart()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	armAll(ctx, t, []string{url1, url2}, byID(c.agents), s.callback, fires, 16, func(i int, sid string) {
		mu.Lock()
		acked[i] = true
		fires[i].scheduleID = sid
		mu.Unlock()
	})
	armed := time.Now()
	chaos.Wait()
	within := 45 * time.Second
	if soak() {
		within = 3 * time.Minute
	}
	if !s.waitSlots(n, within) {
		got, _ := s.counts()
		st, err := e.Stats(ctx)
		t.Fatalf("%d of %d fires reached the agent within %s (store %+v, %v)", got, n, within, st, err)
	}
	done := time.Now()
	slots, arrivals := s.counts()
	t.Logf("armed in %s; all %d slots arrived %s after the last fire_at; %d arrivals (%d repeats)",
		armed.Sub(first.Add(-3*time.Second)).Round(time.Millisecond), slots,
		done.Sub(fires[n-1].fireAt).Round(time.Millisecond), arrivals, arrivals-slots)
	mu.Lock()
	checkDelivered(t, s, fires, acked)
	mu.Unlock()
	// The killed relay's leases lapse after `lease`; the survivors' reapers
	// (every lease/2) return them, and they are delivered and acked.
	waitEmpty(t, e, 3*lease+5*time.Second)
}

// TestRedisRestartKeepsAcknowledgedArms kills redis-server (append-only
// file, fsync always) twice, once while fires are being armed through the
// agent API and once while they are being delivered, restarting it each
// time: every arm NAS acknowledged reaches the agent.
func TestRedisRestartKeepsAcknowledgedArms(t *testing.T) {
	n, spread := 3000, 3*time.Second
	if soak() {
		n, spread = 20000, 10*time.Second
	}
	const lease = 2 * time.Second
	srv := redistest.Start(t, redistest.Options{AOF: true})
	store := srv.URL() + "/0?prefix=restart"
	c := newCluster(t, store, 10)
	_, url := c.startNAS("nas")
	c.startRelay("relay", "nas", lease)
	s := startSink(t, fetchJWKS(t, url))
	e := openStore(t, store)

	first := time.Now().Add(3 * time.Second)
	fires := plan(c.agents, n, first, spread)
	acked := make([]bool, n)
	var mu sync.Mutex
	ackedCount := 0
	restarts := make(chan string, 2)
	bounce := func(when string) {
		if err := srv.Kill(); err != nil {
			t.Errorf("kill redis: %v", err)
		}
		time.Sleep(300 * time.Millisecond) // Redis stays down a while
		if err := srv.Restart(); err != nil {
			t.Errorf("restart redis: %v", err)
		}
		restarts <- when
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	armAll(ctx, t, []string{url}, byID(c.agents), s.callback, fires, 8, func(i int, sid string) {
		mu.Lock()
		defer mu.Unlock()
		acked[i] = true
		fires[i].scheduleID = sid
		ackedCount++
		if ackedCount == n/3 {
			go bounce("arming")
		}
	})
	t.Logf("redis-server restarted during %s", <-restarts)
	// Bounce again while the fires are being delivered.
	time.Sleep(time.Until(first.Add(spread / 2)))
	bounce("delivery")
	t.Logf("redis-server restarted during %s", <-restarts)
	if !s.waitSlots(n, 45*time.Second) {
		got, _ := s.counts()
		st, err := e.Stats(ctx)
		t.Fatalf("%d of %d fires reached the agent (store %+v, %v)", got, n, st, err)
	}
	mu.Lock()
	checkDelivered(t, s, fires, acked)
	mu.Unlock()
	waitEmpty(t, e, 3*lease+5*time.Second)
}
