package redise2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// Failover tests: a 6-node Redis Cluster on loopback (3 masters, one
// replica each, cluster-node-timeout 2000, cluster-require-full-coverage
// no) under one NAS and two relay processes, a master killed with SIGKILL.

const (
	foShards      = 12
	foNodeTimeout = 2 * time.Second
	// foRecover is how soon after the promotion of the replica the failed
	// master's shards must flow again and its agents' API calls answer 200.
	foRecover = 5 * time.Second
)

// foRig is a cluster of Chronos processes on a Redis Cluster with replicas.
type foRig struct {
	t       *testing.T
	rc      *redistest.Cluster
	prefix  string
	c       *cluster
	nasURL  string
	readyz  []string       // the /readyz of NAS and every relay
	slotOf  map[int]int    // shard → its Cluster slot
	ownerOf map[int]string // shard → the address of its master at the start
}

// startFailoverRig starts the Redis Cluster, one NAS and relays relay
// processes on store options extra (e.g. "&min_replicas=1").
func startFailoverRig(t *testing.T, agents, relays int, lease time.Duration, extra string) *foRig {
	t.Helper()
	rc := redistest.StartClusterWithReplicas(t, 3, foNodeTimeout)
	r := &foRig{t: t, rc: rc, prefix: "fo", slotOf: map[int]int{}, ownerOf: map[int]string{}}
	store := rc.URL() + "&prefix=" + r.prefix + "&shards=" + strconv.Itoa(foShards) + extra
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for s := range foShards {
		slot, err := rc.Slot(ctx, fmt.Sprintf("{chronos:%s:%d}", r.prefix, s))
		if err != nil {
			t.Fatal(err)
		}
		r.slotOf[s] = slot
		m := rc.OwnerNow(ctx, slot)
		if m == nil {
			t.Fatalf("no master serves slot %d", slot)
		}
		r.ownerOf[s] = m.Addr()
	}
	r.c = newCluster(t, store, agents)
	var nas *proc
	nas, r.nasURL = r.c.startNAS("nas")
	_ = nas
	r.readyz = append(r.readyz, r.nasURL+contract.PathReadyz)
	for i := range relays {
		health := freeAddr(t)
		p := startProc(t, fmt.Sprintf("relay-%d", i), r.c.dir, "relay", "--config", "nas.yaml", "--dispatchers", "2",
			"--lease", lease.String(), "--listen", health)
		u := "http://" + health + "/readyz"
		waitReady(t, p, u, 30*time.Second)
		r.readyz = append(r.readyz, u)
	}
	return r
}

// foShardOf is the engine's shard of an agent id (FNV-1a, as relay/redis).
func foShardOf(agent string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(agent))
	return int(h.Sum32() % foShards)
}

// node returns the node of addr.
func (r *foRig) node(addr string) *redistest.Server {
	for _, n := range r.rc.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	r.t.Fatalf("no node %s", addr)
	return nil
}

// busiest returns the address of the master serving most of fires.
func (r *foRig) busiest(fires []fire) string {
	per := map[string]int{}
	for _, f := range fires {
		per[r.ownerOf[foShardOf(f.agent)]]++
	}
	best := ""
	for a, n := range per {
		if best == "" || n > per[best] || (n == per[best] && a < best) {
			best = a
		}
	}
	return best
}

// onMaster reports whether agent's shard was served by master addr at the
// start.
func (r *foRig) onMaster(agent, addr string) bool { return r.ownerOf[foShardOf(agent)] == addr }

// agentOn returns an agent whose shard master addr serves (at the start),
// or one whose it does not.
func (r *foRig) agentOn(addr string, on bool) agentCred {
	for _, a := range r.c.agents {
		if r.onMaster(a.id, addr) == on {
			return a
		}
	}
	r.t.Fatalf("no agent with on=%v for master %s", on, addr)
	return agentCred{}
}

// waitPromoted waits until a node other than dead serves the slots dead
// served, and returns when that was seen.
func (r *foRig) waitPromoted(dead string, within time.Duration) time.Time {
	r.t.Helper()
	var slot int
	for s, a := range r.ownerOf {
		if a == dead {
			slot = r.slotOf[s]
			break
		}
	}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		m := r.rc.OwnerNow(ctx, slot)
		cancel()
		if m != nil && m.Addr() != dead {
			return time.Now()
		}
		time.Sleep(50 * time.Millisecond) // failover poll interval
	}
	r.t.Fatalf("no replica of %s promoted within %s", dead, within)
	return time.Time{}
}

// readyProbe polls every /readyz every 100 ms with a 1 s client timeout.
type readyProbe struct {
	mu       sync.Mutex
	slowest  time.Duration
	late     []string // probes not answered within 1 s
	answered int
	unready  int // 503 answers
	stop     chan struct{}
	done     sync.WaitGroup
}

// startReadyProbe starts probing r's /readyz endpoints until stopped.
func (r *foRig) startReadyProbe() *readyProbe {
	p := &readyProbe{stop: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	for _, u := range r.readyz {
		p.done.Go(func() {
			for {
				select {
				case <-p.stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				start := time.Now()
				resp, err := client.Get(u)
				took := time.Since(start)
				p.mu.Lock()
				p.slowest = max(p.slowest, took)
				switch {
				case err != nil:
					p.late = append(p.late, fmt.Sprintf("%s at %s: %v", u, start.Format("15:04:05.000"), err))
				default:
					p.answered++
					if resp.StatusCode == http.StatusServiceUnavailable {
						p.unready++
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				p.mu.Unlock()
			}
		})
	}
	return p
}

// end stops the probe and fails t if a probe went unanswered for 1 s.
func (p *readyProbe) end(t *testing.T) {
	t.Helper()
	close(p.stop)
	p.done.Wait()
	t.Logf("/readyz: %d answers (%d were 503), slowest %s", p.answered, p.unready, p.slowest.Round(time.Millisecond))
	if len(p.late) > 0 {
		t.Errorf("%d /readyz probes not answered within 1s, e.g. %s", len(p.late), p.late[0])
	}
}

// apiCall is one provision an API probe made.
type apiCall struct {
	start, end time.Time
	status     int // 0: no answer
}

// provisionStatus arms f as agent a and returns the HTTP status (0 when no
// answer came), the schedule id on 200 and the answer's error code.
func provisionStatus(ctx context.Context, client *http.Client, nasURL string, a agentCred, callback string, f fire) (int, string, string) {
	at := f.fireAt.UTC().Format(time.RFC3339Nano)
	body, _ := json.Marshal(map[string]string{
		"job_id": f.job, "fire_at": at, "agent_callback_url": callback, "dedup_key": f.job + ":" + at,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, nasURL+contract.PathProvision, bytes.NewReader(body))
	if err != nil {
		return 0, "", err.Error()
	}
	req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	req.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+a.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		ScheduleID string `json:"schedule_id"`
		Error      string `json:"error"`
	}
	_ = json.Unmarshal(b, &out)
	code := out.Error
	if code == "" && resp.StatusCode != http.StatusOK {
		code = string(b)
	}
	return resp.StatusCode, out.ScheduleID, code
}

// apiProbe arms a far-future one-shot as agent every 100 ms until stopped,
// recording each call.
func (r *foRig) apiProbe(a agentCred, callback string, stop <-chan struct{}) func() []apiCall {
	var mu sync.Mutex
	var calls []apiCall
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 15 * time.Second}
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			f := fire{agent: a.id, job: fmt.Sprintf("probe-%05d", i), fireAt: time.Now().Add(time.Hour).Truncate(time.Millisecond)}
			start := time.Now()
			st, _, _ := provisionStatus(context.Background(), client, r.nasURL, a, callback, f)
			mu.Lock()
			calls = append(calls, apiCall{start: start, end: time.Now(), status: st})
			mu.Unlock()
		}
	})
	return func() []apiCall {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
}

// checkAPIBack fails t unless every API call that started foRecover after
// promoted answered 200; it returns the window of non-200 answers.
func checkAPIBack(t *testing.T, calls []apiCall, promoted time.Time) (first, last time.Time, refused int) {
	t.Helper()
	for _, c := range calls {
		if c.status == http.StatusOK {
			continue
		}
		refused++
		if first.IsZero() {
			first = c.start
		}
		last = c.end
		if c.start.After(promoted.Add(foRecover)) {
			t.Errorf("an API call for an agent of the failed master started %s after the promotion answered %d",
				c.start.Sub(promoted).Round(time.Millisecond), c.status)
		}
	}
	return first, last, refused
}

// TestClusterFailoverDuringBurst kills (SIGKILL) the master serving most
// fires 0.5 s into a burst of 6,000 fires over 20 agents: no acknowledged
// fire is lost, no fire of a surviving master is delivered twice, the
// failed master's shards flow again and its agents' API calls answer 200
// within 5 s of the replica's promotion, and /readyz answers within 1 s
// throughout.
func TestClusterFailoverDuringBurst(t *testing.T) {
	n, spread := 6000, 6*time.Second
	const lease = 3 * time.Second
	r := startFailoverRig(t, 20, 2, lease, "")
	s := startSink(t, fetchJWKS(t, r.nasURL))

	first := time.Now().Add(6 * time.Second)
	fires := plan(r.c.agents, n, first, spread)
	acked := make([]bool, n)
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	armStart := time.Now()
	armAll(ctx, t, []string{r.nasURL}, byID(r.c.agents), s.callback, fires, 16, func(i int, sid string) {
		mu.Lock()
		acked[i] = true
		fires[i].scheduleID = sid
		mu.Unlock()
	})
	if time.Now().After(first) {
		t.Fatalf("arming %d fires took %s, past the first fire_at", n, time.Since(armStart))
	}
	dead := r.busiest(fires)
	onDead := 0
	for _, f := range fires {
		if r.onMaster(f.agent, dead) {
			onDead++
		}
	}
	t.Logf("armed %d fires in %s; %d of them on master %s", n, time.Since(armStart).Round(time.Millisecond), onDead, dead)

	probe := r.startReadyProbe()
	stopAPI := make(chan struct{})
	apiCalls := r.apiProbe(r.agentOn(dead, true), s.callback(r.agentOn(dead, true).id), stopAPI)

	killAt := first.Add(500 * time.Millisecond)
	time.Sleep(time.Until(killAt))
	killAt = time.Now()
	if err := r.node(dead).Kill(); err != nil {
		t.Fatalf("kill master: %v", err)
	}
	promoted := r.waitPromoted(dead, 20*time.Second)
	t.Logf("master %s killed at +%s into the burst; replica promoted %s after the kill",
		dead, killAt.Sub(first).Round(time.Millisecond), promoted.Sub(killAt).Round(time.Millisecond))

	if !s.waitSlots(n, 60*time.Second) {
		got, _ := s.counts()
		t.Fatalf("%d of %d fires reached the agent within 60s", got, n)
	}
	time.Sleep(time.Second) // let late repeats arrive
	close(stopAPI)
	calls := apiCalls()
	probe.end(t)

	mu.Lock()
	checkDelivered(t, s, fires, acked)
	mu.Unlock()

	// Repeats by master; the failed master's lag.
	s.mu.Lock()
	dupDead, dupLive := 0, 0
	var lateDead time.Duration // the latest arrival of a failed master's fire due before the promotion, after the promotion
	var pauseFrom, resumedAt time.Time
	lateShown := 0
	for _, f := range fires {
		key := slot(f.agent, f.job, f.fireAt)
		on := r.onMaster(f.agent, dead)
		if s.arrivals[key] > 1 {
			if on {
				dupDead += s.arrivals[key] - 1
			} else {
				dupLive += s.arrivals[key] - 1
				if dupLive <= 5 {
					t.Logf("fire %s of a surviving master arrived %d times", key, s.arrivals[key])
				}
			}
		}
		if !on {
			continue
		}
		at := s.firstAt[key]
		if !f.fireAt.After(promoted) {
			lateDead = max(lateDead, at.Sub(promoted))
			if at.Sub(promoted) > foRecover && lateShown < 3 {
				lateShown++
				t.Logf("late: %s due %s after the kill arrived %s after the promotion", key,
					f.fireAt.Sub(killAt).Round(time.Millisecond), at.Sub(promoted).Round(time.Millisecond))
			}
		}
		if at.Before(killAt) && at.After(pauseFrom) {
			pauseFrom = at
		}
		if f.fireAt.After(killAt) && (resumedAt.IsZero() || at.Before(resumedAt)) {
			resumedAt = at
		}
	}
	s.mu.Unlock()
	t.Logf("failed master's fires: last before the kill at +%s, first after at +%s (a pause of %s, %s after the promotion); all due before the promotion arrived by +%s after it",
		pauseFrom.Sub(first).Round(time.Millisecond), resumedAt.Sub(first).Round(time.Millisecond),
		resumedAt.Sub(pauseFrom).Round(time.Millisecond), resumedAt.Sub(promoted).Round(time.Millisecond), lateDead.Round(time.Millisecond))
	t.Logf("repeats: %d of the failed master's fires, %d of the surviving masters'", dupDead, dupLive)
	if resumedAt.Sub(promoted) > foRecover {
		t.Errorf("the failed master's fires flowed again %s after the promotion, want within %s", resumedAt.Sub(promoted), foRecover)
	}
	if dupLive > 0 {
		t.Errorf("%d fires of the surviving masters delivered twice, want none", dupLive)
	}
	// Fires in flight on the failed master when it died come back when
	// their leases lapse and NAS answers again: later than the flow of its
	// other fires, within a few seconds more (see docs/capacity.md).
	if lateDead > foRecover {
		t.Logf("fires of the failed master due before the promotion arrived up to %s after it", lateDead.Round(time.Millisecond))
	}
	if lateDead > 3*foRecover {
		t.Errorf("the failed master's fires due before the promotion arrived up to %s after it, want within %s", lateDead, 3*foRecover)
	}
	from, to, refused := checkAPIBack(t, calls, promoted)
	if refused > 0 {
		t.Logf("API calls for an agent of the failed master: %d of %d refused, from +%s to +%s after the kill (%s after the promotion)",
			refused, len(calls), from.Sub(killAt).Round(time.Millisecond), to.Sub(killAt).Round(time.Millisecond), to.Sub(promoted).Round(time.Millisecond))
	} else {
		t.Logf("API calls for an agent of the failed master: all %d answered 200", len(calls))
	}
}

// TestClusterFailoverDuringArming kills (SIGKILL) a master while 5,000
// fires are armed through the agent API: every arm answered 200 is
// delivered, every refusal is a 503 store_unavailable, and the failed
// master's agents are served again within 5 s of the promotion.
func TestClusterFailoverDuringArming(t *testing.T) {
	const n = 5000
	r := startFailoverRig(t, 20, 2, 3*time.Second, "")
	s := startSink(t, fetchJWKS(t, r.nasURL))
	first := time.Now().Add(15 * time.Second)
	fires := plan(r.c.agents, n, first, 2*time.Second)
	dead := r.busiest(fires)
	agents := byID(r.c.agents)

	var mu sync.Mutex
	acked := make([]bool, n)
	statuses := map[string]int{} // "status code" → count, refusals only
	var calls []apiCall          // the failed master's agents' calls
	var killed, promoted time.Time
	var killOnce sync.Once
	ackedCount := 0
	killDone := make(chan struct{})
	client := &http.Client{Timeout: 15 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	probe := r.startReadyProbe()
	var wg sync.WaitGroup
	var next sync.Mutex
	idx := 0
	for range 16 {
		wg.Go(func() {
			for {
				next.Lock()
				i := idx
				idx++
				next.Unlock()
				if i >= n {
					return
				}
				f := fires[i]
				for ctx.Err() == nil {
					start := time.Now()
					st, sid, code := provisionStatus(ctx, client, r.nasURL, agents[f.agent], s.callback(f.agent), f)
					mu.Lock()
					if r.onMaster(f.agent, dead) {
						calls = append(calls, apiCall{start: start, end: time.Now(), status: st})
					}
					if st == http.StatusOK {
						acked[i] = true
						fires[i].scheduleID = sid
						ackedCount++
						if ackedCount == n/3 {
							killOnce.Do(func() {
								go func() {
									defer close(killDone)
									killed = time.Now()
									if err := r.node(dead).Kill(); err != nil {
										t.Errorf("kill master: %v", err)
									}
									promoted = r.waitPromoted(dead, 20*time.Second)
								}()
							})
						}
						mu.Unlock()
						break
					}
					statuses[fmt.Sprintf("%d %s", st, code)]++
					mu.Unlock()
					time.Sleep(50 * time.Millisecond) // agent-side retry backoff
				}
			}
		})
	}
	wg.Wait()
	<-killDone
	armed := time.Now()
	t.Logf("master %s killed %s into arming, replica promoted %s later; arming done %s after the kill; refusals: %v",
		dead, "a third", promoted.Sub(killed).Round(time.Millisecond), armed.Sub(killed).Round(time.Millisecond), statuses)
	if armed.After(first) {
		t.Fatalf("arming took past the first fire_at (%s)", armed.Sub(first))
	}
	for k := range statuses {
		if k != "503 store_unavailable" {
			t.Errorf("an arm was refused with %q, want only 503 store_unavailable", k)
		}
	}
	mu.Lock()
	from, to, refused := checkAPIBack(t, calls, promoted)
	mu.Unlock()
	if refused > 0 {
		t.Logf("%d arms of the failed master's agents refused, from +%s to +%s after the kill (%s after the promotion)",
			refused, from.Sub(killed).Round(time.Millisecond), to.Sub(killed).Round(time.Millisecond), to.Sub(promoted).Round(time.Millisecond))
	}
	if !s.waitSlots(n, time.Until(first)+40*time.Second) {
		got, _ := s.counts()
		t.Fatalf("%d of %d fires reached the agent", got, n)
	}
	probe.end(t)
	mu.Lock()
	checkDelivered(t, s, fires, acked)
	mu.Unlock()
}

// TestClusterMinReplicasRefusesUnreplicatedArms runs NAS on a store with
// min_replicas=1: while the replica of one master is paused (SIGSTOP), arms
// of that master's agents are refused with 503 store_unavailable instead of
// acknowledged, and those of the other masters' agents answer 200; once it
// resumes they answer 200 again.
func TestClusterMinReplicasRefusesUnreplicatedArms(t *testing.T) {
	r := startFailoverRig(t, 12, 0, 3*time.Second, "&min_replicas=1&replica_timeout=300ms")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	addrs := slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, a := range r.ownerOf {
			if !seen[a] {
				seen[a] = true
				if !yield(a) {
					return
				}
			}
		}
	})
	m := addrs[0]
	on, off := r.agentOn(m, true), r.agentOn(m, false)
	arm := func(a agentCred, job string) (int, string) {
		st, _, code := provisionStatus(ctx, client, r.nasURL, a, "http://127.0.0.1:9/a/"+a.id,
			fire{agent: a.id, job: job, fireAt: time.Now().Add(time.Hour).Truncate(time.Millisecond)})
		return st, code
	}
	for _, a := range []agentCred{on, off} {
		if st, code := arm(a, "before"); st != http.StatusOK {
			t.Fatalf("arm of %s with every replica up: %d %s", a.id, st, code)
		}
	}
	replica := r.rc.ReplicaOf(ctx, r.node(m))
	if replica == nil {
		t.Fatalf("no replica of %s", m)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	st, code := arm(on, "paused")
	took := time.Since(start)
	stOff, codeOff := arm(off, "paused")
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica %s of %s paused: arm of its agent %d %s in %s; of another master's agent %d", replica.Addr(), m, st, code, took.Round(time.Millisecond), stOff)
	if st != http.StatusServiceUnavailable || code != "store_unavailable" {
		t.Errorf("arm while the replica is paused answered %d %s, want 503 store_unavailable", st, code)
	}
	if stOff != http.StatusOK {
		t.Errorf("arm of another master's agent answered %d %s, want 200", stOff, codeOff)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, code := arm(on, "resumed")
		if st == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("arm after the replica resumed: %d %s", st, code)
		}
		time.Sleep(100 * time.Millisecond) // replica catching up
	}
}
