package redise2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// Many agents on one NAS: one agent's backlog, slow answers or cold start
// must not hold up another agent's fires. These tests run `chronos nas` on
// its defaults for dispatch (its own dispatchers, relay.per_agent at its
// defaults) on the embedded engine and on Redis, with agents played by the
// sink.

// startDefaultNAS starts `chronos nas` on the cluster's store with NAS's
// dispatch defaults (only the agent API's rate limits are raised, so that
// the test can provision quickly) and waits until it is ready.
func (c *cluster) startDefaultNAS(name string, args ...string) (*proc, string) {
	c.t.Helper()
	return c.startNASWith(name, "", args...)
}

// startNASWith is startDefaultNAS with extra, YAML lines that go at the
// top of the config (as "operator_token_file: f\nrelay:\n  misfire_grace: 3s").
func (c *cluster) startNASWith(name, extra string, args ...string) (*proc, string) {
	c.t.Helper()
	addr := freeAddr(c.t)
	url := "http://" + addr
	relay := "relay:\n"
	if i := strings.Index(extra, relay); i >= 0 {
		extra, relay = extra[:i], extra[i:]
	}
	writeFile(c.t, c.dir, name+".yaml", fmt.Sprintf(`listen: %s
public_url: %s
store: %q
signing_keys_dir: keys
`+extra+relay+`  secrets_file: relay-secrets
agents_file: agents.yaml
allow_private_callbacks: true
log_level: warn
limits:
  rate_per_second: 1000000
  burst: 1000000
`, addr, publicURL, c.store))
	p := startProc(c.t, name, c.dir, append([]string{"nas", "--config", name + ".yaml"}, args...)...)
	waitReady(c.t, p, url+contract.PathReadyz, 30*time.Second)
	return p, url
}

// engines are the stores the neighbour tests run on.
func engines(t *testing.T) []struct{ name, store string } {
	return []struct{ name, store string }{
		{"memory", "memory"},
		{"redis", redistest.URL(t) + "/0?prefix=" + redistest.Prefix(t)},
	}
}

// burst provisions n fires of each agent in counts, all due at at, and
// fails the test if arming ended after at.
func burst(t *testing.T, c *cluster, nasURL string, s *sink, counts map[string]int, at time.Time) []fire {
	t.Helper()
	var fires []fire
	for _, a := range c.agents {
		for i := range counts[a.id] {
			fires = append(fires, fire{agent: a.id, job: fmt.Sprintf("job-%05d", i), fireAt: at})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	armAll(ctx, t, []string{nasURL}, byID(c.agents), s.callback, fires, 8, func(i int, sid string) {
		mu.Lock()
		fires[i].scheduleID = sid
		mu.Unlock()
	})
	if time.Now().After(at) {
		t.Fatalf("arming %d fires ended after their fire_at: the test machine is too slow for this test", len(fires))
	}
	return fires
}

// agentLags returns the lags of agent's first arrivals, sorted.
func (s *sink) agentLags(agent string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lags []time.Duration
	prefix := agent + "/"
	for key, lag := range s.lags {
		if len(key) > len(prefix) && key[:len(prefix)] == prefix {
			lags = append(lags, lag)
		}
	}
	slices.Sort(lags)
	return lags
}

// mustArrive waits until n distinct slots arrived, failing the test when
// within passes first.
func (s *sink) mustArrive(t *testing.T, n int, within time.Duration) {
	t.Helper()
	if !s.waitSlots(n, within) {
		got, _ := s.counts()
		t.Fatalf("%d of %d fires arrived", got, n)
	}
}

// waitAgent waits until n of agent's fires arrived or within passes.
func (s *sink) waitAgent(agent string, n int, within time.Duration) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for len(s.agentLags(agent)) < n {
		select {
		case <-s.changed:
		case <-deadline.C:
			return
		}
	}
}

// counters reads the requests and refusals an agent got.
func (s *sink) counters(agent string) (requests, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[agent], s.refused[agent]
}

// TestSlowNeighbourDoesNotDelayOthers: 500 fires of an agent that answers
// after a second and 20 of a prompt agent, all due at one instant: the
// prompt agent's 20 all arrive within a second of fire_at, and the slow
// agent's fires all arrive (at its parallelism, four at a time).
func TestSlowNeighbourDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	for _, eng := range engines(t) {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, eng.store, 2)
			slow, prompt := c.agents[0].id, c.agents[1].id
			_, url := c.startDefaultNAS("nas")
			s := startSink(t, fetchJWKS(t, url))
			s.behave = func(agent string, _ time.Time) behaviour {
				if agent == slow {
					return behaviour{Delay: time.Second}
				}
				return behaviour{}
			}
			at := time.Now().Add(4 * time.Second).Truncate(time.Second)
			fires := burst(t, c, url, s, map[string]int{slow: 500, prompt: 20}, at)
			s.waitAgent(prompt, 20, 30*time.Second)
			lags := s.agentLags(prompt)
			if len(lags) != 20 {
				t.Fatalf("%d of the prompt agent's 20 fires arrived", len(lags))
			}
			if worst := lags[len(lags)-1]; worst > time.Second {
				t.Fatalf("the prompt agent's slowest fire arrived %s after fire_at; want within 1s (lags %v)", worst, lags)
			}
			// 500 fires, four at a time, a second each.
			s.mustArrive(t, len(fires), 200*time.Second)
			checkDelivered(t, s, fires, allAcked(len(fires)))
		})
	}
}

// TestWakingNeighbourDoesNotDelayOthers: 1,000 fires of an agent that
// answers 503 with Retry-After: 5 (for ten seconds) and 20 of a prompt
// agent: the prompt agent's fires arrive within half a second; the waking
// agent's all arrive once it answers.
func TestWakingNeighbourDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	for _, eng := range engines(t) {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, eng.store, 2)
			waking, prompt := c.agents[0].id, c.agents[1].id
			_, url := c.startDefaultNAS("nas")
			s := startSink(t, fetchJWKS(t, url))
			at := time.Now().Add(5 * time.Second).Truncate(time.Second)
			awake := at.Add(10 * time.Second)
			s.behave = func(agent string, now time.Time) behaviour {
				if agent == waking && now.Before(awake) {
					return behaviour{Refuse: http.StatusServiceUnavailable, RetryAfter: "5"}
				}
				return behaviour{}
			}
			fires := burst(t, c, url, s, map[string]int{waking: 1000, prompt: 20}, at)
			s.waitAgent(prompt, 20, 30*time.Second)
			lags := s.agentLags(prompt)
			if len(lags) != 20 || lags[len(lags)-1] > 500*time.Millisecond {
				t.Fatalf("the prompt agent's fires arrived %v after fire_at; want all 20 within 0.5s", lags)
			}
			s.mustArrive(t, len(fires), 90*time.Second)
			checkDelivered(t, s, fires, allAcked(len(fires)))
			// One probe per Retry-After, not a retry of every fire.
			if _, refused := s.counters(waking); refused > 4+10 {
				t.Fatalf("the waking agent refused %d requests in its 10s; want its parallelism and a probe per 5s", refused)
			}
		})
	}
}

// TestWakingAgentIsProbed: an agent with 100 due fires that answers 503 for
// ten seconds receives at most 20 requests in those ten seconds, then all
// 100 fires within five seconds of its first 2xx, each once.
func TestWakingAgentIsProbed(t *testing.T) {
	t.Parallel()
	for _, eng := range engines(t) {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, eng.store, 1)
			agent := c.agents[0].id
			_, url := c.startDefaultNAS("nas")
			s := startSink(t, fetchJWKS(t, url))
			at := time.Now().Add(3 * time.Second).Truncate(time.Second)
			awake := at.Add(10 * time.Second)
			s.behave = func(_ string, now time.Time) behaviour {
				if now.Before(awake) {
					return behaviour{Refuse: http.StatusServiceUnavailable}
				}
				return behaviour{}
			}
			fires := burst(t, c, url, s, map[string]int{agent: 100}, at)
			s.mustArrive(t, len(fires), 90*time.Second)
			checkDelivered(t, s, fires, allAcked(len(fires)))
			if _, refused := s.counters(agent); refused > 20 {
				t.Fatalf("the waking agent got %d requests while it answered 503; want at most 20", refused)
			}
			s.mu.Lock()
			var first, last time.Time
			for _, at := range s.firstAt {
				if first.IsZero() || at.Before(first) {
					first = at
				}
				if at.After(last) {
					last = at
				}
			}
			s.mu.Unlock()
			if took := last.Sub(first); took > 5*time.Second {
				t.Fatalf("the fires took %s after the agent's first 2xx; want within 5s", took)
			}
		})
	}
}

// TestKilledNASLosesNoHeldFire: NAS is killed (SIGKILL) while it delivers a
// slow agent's fires four at a time and holds the rest back in Redis; once
// it is back, every fire arrives and each slot is accepted once.
func TestKilledNASLosesNoHeldFire(t *testing.T) {
	t.Parallel()
	store := redistest.URL(t) + "/0?prefix=" + redistest.Prefix(t)
	c := newCluster(t, store, 2)
	slow, prompt := c.agents[0].id, c.agents[1].id
	nas, url := c.startDefaultNAS("nas")
	s := startSink(t, fetchJWKS(t, url))
	s.behave = func(agent string, _ time.Time) behaviour {
		if agent == slow {
			return behaviour{Delay: 300 * time.Millisecond}
		}
		return behaviour{}
	}
	at := time.Now().Add(3 * time.Second).Truncate(time.Second)
	fires := burst(t, c, url, s, map[string]int{slow: 60, prompt: 10}, at)
	if !s.waitSlots(20, 30*time.Second) {
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
	s.mustArrive(t, len(fires), 90*time.Second)
	checkDelivered(t, s, fires, allAcked(len(fires)))
	waitEmpty(t, e, 30*time.Second)
}

// allAcked marks n fires acknowledged.
func allAcked(n int) []bool {
	acked := make([]bool, n)
	for i := range acked {
		acked[i] = true
	}
	return acked
}
