package postgrese2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/pgtest"
)

// Many agents on one NAS that dispatches on its defaults (its own
// dispatchers, relay.per_agent at its defaults) on PostgreSQL: one agent's
// backlog or slow answers must not hold up another agent's fires, and a
// NAS killed while it holds a slow agent's backlog loses none of it.

// burst arms counts[agent] fires of each agent, all due at at, through
// nasURL, and fails the test if arming ended after at.
func burst(t *testing.T, c *cluster, nasURL string, s *sink, counts map[string]int, at time.Time) ([]fire, []bool) {
	t.Helper()
	var fires []fire
	for _, a := range c.agents {
		for i := range counts[a.id] {
			fires = append(fires, fire{agent: a.id, job: fmt.Sprintf("job-%05d", i), fireAt: at})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acked := armAll(ctx, t, []string{nasURL}, c, s, fires, 8, nil)
	if time.Now().After(at) {
		t.Fatalf("arming %d fires ended after their fire_at: the test machine is too slow for this test", len(fires))
	}
	return fires, acked
}

// TestSlowNeighbourDoesNotDelayOthers: fires of an agent that answers after
// a second and 20 of a prompt agent, all due at one instant: the prompt
// agent's 20 all arrive within a second of fire_at, and the slow agent's
// fires all arrive (at its parallelism, four at a time): 100 of them, 500
// with CHRONOS_SOAK=1.
func TestSlowNeighbourDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	slowFires := 100
	if soak() {
		slowFires = 500
	}
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 2)
	slow, prompt := c.agents[0].id, c.agents[1].id
	_, url := c.startNAS("nas", "")
	s := startSink(t, fetchJWKS(t, url))
	s.behave = func(agent string, _ time.Time) behaviour {
		if agent == slow {
			return behaviour{Delay: time.Second}
		}
		return behaviour{}
	}
	at := time.Now().Add(4 * time.Second).Truncate(time.Second)
	fires, acked := burst(t, c, url, s, map[string]int{slow: slowFires, prompt: 20}, at)
	s.waitFor(30*time.Second, func() bool { return len(s.agentLags(prompt)) >= 20 })
	lags := s.agentLags(prompt)
	if len(lags) != 20 {
		t.Fatalf("%d of the prompt agent's 20 fires arrived", len(lags))
	}
	if worst := lags[len(lags)-1]; worst > time.Second {
		t.Fatalf("the prompt agent's slowest fire arrived %s after fire_at; want within 1s (lags %v)", worst, lags)
	}
	// Four at a time, a second each, and some slack.
	e := openStore(t, store)
	s.mustArrive(t, e, len(fires), time.Duration(slowFires/4+30)*time.Second)
	checkDelivered(t, s, fires, acked)
}

// TestWakingNeighbourDoesNotDelayOthers: 1,000 fires of an agent that
// answers 503 with Retry-After: 5 (for ten seconds) and 20 of a prompt
// agent: the prompt agent's fires arrive within half a second; the waking
// agent's all arrive once it answers, after a probe per Retry-After rather
// than a retry of every fire.
func TestWakingNeighbourDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 2)
	waking, prompt := c.agents[0].id, c.agents[1].id
	_, url := c.startNAS("nas", "")
	s := startSink(t, fetchJWKS(t, url))
	at := time.Now().Add(5 * time.Second).Truncate(time.Second)
	awake := at.Add(10 * time.Second)
	s.behave = func(agent string, now time.Time) behaviour {
		if agent == waking && now.Before(awake) {
			return behaviour{Refuse: http.StatusServiceUnavailable, RetryAfter: "5"}
		}
		return behaviour{}
	}
	fires, acked := burst(t, c, url, s, map[string]int{waking: 1000, prompt: 20}, at)
	s.waitFor(30*time.Second, func() bool { return len(s.agentLags(prompt)) >= 20 })
	if lags := s.agentLags(prompt); len(lags) != 20 || lags[len(lags)-1] > 500*time.Millisecond {
		t.Fatalf("the prompt agent's fires arrived %v after fire_at; want all 20 within 0.5s", lags)
	}
	s.mustArrive(t, openStore(t, store), len(fires), 90*time.Second)
	checkDelivered(t, s, fires, acked)
	if refused := s.refusals(waking); refused > 4+10 {
		t.Fatalf("the waking agent refused %d requests in its 10s; want its parallelism and a probe per 5s", refused)
	}
}

// TestWakingAgentIsProbed: an agent with 100 due fires that answers 503 for
// ten seconds receives at most 20 requests in those ten seconds, then all
// 100 fires within five seconds of its first 2xx, each once.
func TestWakingAgentIsProbed(t *testing.T) {
	t.Parallel()
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 1)
	agent := c.agents[0].id
	_, url := c.startNAS("nas", "")
	s := startSink(t, fetchJWKS(t, url))
	at := time.Now().Add(3 * time.Second).Truncate(time.Second)
	awake := at.Add(10 * time.Second)
	s.behave = func(_ string, now time.Time) behaviour {
		if now.Before(awake) {
			return behaviour{Refuse: http.StatusServiceUnavailable}
		}
		return behaviour{}
	}
	fires, acked := burst(t, c, url, s, map[string]int{agent: 100}, at)
	s.mustArrive(t, openStore(t, store), len(fires), 90*time.Second)
	checkDelivered(t, s, fires, acked)
	if refused := s.refusals(agent); refused > 20 {
		t.Fatalf("the waking agent got %d requests while it answered 503; want at most 20", refused)
	}
	if took := s.firstArrivals(); took > 5*time.Second {
		t.Fatalf("the fires took %s after the agent's first 2xx; want within 5s", took)
	}
}

// TestKilledNASLosesNoHeldFire: NAS is killed (SIGKILL) while it delivers a
// slow agent's fires four at a time and holds the rest back in PostgreSQL;
// once it is back, every fire arrives and each slot is claimed once.
func TestKilledNASLosesNoHeldFire(t *testing.T) {
	t.Parallel()
	store := storeOn(t, pgtest.URL(t))
	c := newCluster(t, store, 2)
	slow, prompt := c.agents[0].id, c.agents[1].id
	nas, url := c.startNAS("nas", "")
	s := startSink(t, fetchJWKS(t, url))
	s.behave = func(agent string, _ time.Time) behaviour {
		if agent == slow {
			return behaviour{Delay: 300 * time.Millisecond}
		}
		return behaviour{}
	}
	at := time.Now().Add(3 * time.Second).Truncate(time.Second)
	fires, acked := burst(t, c, url, s, map[string]int{slow: 60, prompt: 10}, at)
	if !s.waitFor(30*time.Second, s.arrived(20)) {
		t.Fatal("deliveries did not start")
	}
	e := openStore(t, store)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	f, err := e.AgentFlow(ctx, slow)
	cancel()
	if err != nil || f.Held == 0 {
		t.Fatalf("before the kill the slow agent's flow is %+v (%v); want fires held in the store", f, err)
	}
	nas.restart()
	// The fires in flight at the kill come back when their leases (30s)
	// lapse; the held ones at once.
	s.mustArrive(t, e, len(fires), 90*time.Second)
	checkDelivered(t, s, fires, acked)
	waitEmpty(t, e, 30*time.Second)
}
