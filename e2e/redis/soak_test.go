package redise2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// soakPlan is the shape of a steady-rate run: jobs interval jobs, each
// firing every interval, for duration, sampled every sampleEvery.
type soakPlan struct {
	jobs        int
	interval    time.Duration
	duration    time.Duration
	sampleEvery time.Duration
}

// rate is the plan's fires per second.
func (p soakPlan) rate() float64 { return float64(p.jobs) / p.interval.Seconds() }

// deliveryTTL mirrors how long NAS remembers a relay call's delivery id:
// the whole window in which its signature verifies (the tolerance both
// ways) and a minute more.
const deliveryTTL = 2*contract.WebhookTolerance + time.Minute

// maxInfoBytesPerFire is what NAS may write at its default level (INFO) per
// fire in steady state: summaries and state changes, no per-fire lines.
const maxInfoBytesPerFire = 20

// soakSample is one reading of the processes and the store.
type soakSample struct {
	at                time.Duration // since the run started
	fires             int           // slots delivered so far
	nasRSS, relayRSS  int64         // kB
	usedMemory        int64         // bytes
	dbSize, deliveryN int64         // all keys; first-delivery records
}

// TestSoakSteadyRate runs NAS at its default log level on Redis with a
// relay process of its own and agents whose interval jobs make a steady
// rate of fires (each agent re-arms its job's next fire when one arrives,
// as agents do). Every fire reaches its agent exactly once; NAS writes
// under maxInfoBytesPerFire bytes per fire; NAS's and the relay's RSS, and
// Redis's memory and first-delivery records, level off.
//
// By default it runs 45 seconds at 150 fires a second; CHRONOS_SOAK=1
// runs the 20 minutes at 300 a second that docs/capacity.md reports.
func TestSoakSteadyRate(t *testing.T) {
	p := soakPlan{jobs: 750, interval: 5 * time.Second, duration: 45 * time.Second, sampleEvery: 10 * time.Second}
	if soak() {
		p = soakPlan{jobs: 3000, interval: 10 * time.Second, duration: 20 * time.Minute, sampleEvery: time.Minute}
	}
	const agents = 10
	srv := redistest.Start(t, redistest.Options{})
	const prefix = "soak"
	store := srv.URL() + "/0?prefix=" + prefix
	c := newCluster(t, store, agents)
	nas, nasURL := c.startNASAtInfo("nas")
	relayProc := c.startRelay("relay", "nas", 15*time.Second)
	s := startSink(t, fetchJWKS(t, nasURL))
	rc := redistest.ClientOf(t, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), p.duration+5*time.Minute)
	defer cancel()

	// The agents' side: a fire that arrives re-arms its job's next one,
	// interval after it, until the run ends.
	cred := byID(c.agents)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var (
		mu       sync.Mutex
		stopping bool
		armed    = map[string]bool{} // slot → acknowledged by NAS
		armErrs  []error
	)
	next := make(chan fire, p.jobs)
	s.onFirst = func(agent, job string, fireAt time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if !stopping {
			next <- fire{agent: agent, job: job, fireAt: fireAt.Add(p.interval)}
		}
	}
	var workers sync.WaitGroup
	for range 16 {
		workers.Go(func() {
			for f := range next {
				if err := provisionRetrying(ctx, client, nasURL, cred[f.agent], s.callback(f.agent), f); err != nil {
					mu.Lock()
					armErrs = append(armErrs, err)
					mu.Unlock()
					continue
				}
				mu.Lock()
				armed[slot(f.agent, f.job, f.fireAt)] = true
				mu.Unlock()
			}
		})
	}

	// The jobs' first fires, spread over one interval.
	start := time.Now()
	first := start.Add(3 * time.Second)
	fires := make([]fire, p.jobs)
	for i := range fires {
		fires[i] = fire{agent: c.agents[i%agents].id, job: fmt.Sprintf("job-%05d", i),
			fireAt: first.Add(time.Duration(int64(p.interval) * int64(i) / int64(p.jobs))).Truncate(time.Millisecond)}
	}
	armAll(ctx, t, []string{nasURL}, cred, s.callback, fires, 16, func(i int, _ string) {
		mu.Lock()
		armed[slot(fires[i].agent, fires[i].job, fires[i].fireAt)] = true
		mu.Unlock()
	})
	t.Logf("%d interval jobs every %s (%.0f fires/s) over %d agents for %s", p.jobs, p.interval, p.rate(), agents, p.duration)

	sample := func() soakSample {
		got, _ := s.counts()
		return soakSample{at: time.Since(start).Round(time.Second), fires: got,
			nasRSS: rssKB(t, nas), relayRSS: rssKB(t, relayProc),
			usedMemory: redisUsedMemory(ctx, t, rc), dbSize: redisDBSize(ctx, t, rc),
			deliveryN: countKeys(ctx, t, rc, "{chronos:"+prefix+":*}:dd:*")}
	}
	logSample := func(x soakSample) {
		t.Logf("t=%-6s fires=%-7d nas_rss=%d kB relay_rss=%d kB redis_used_memory=%.1f MB dbsize=%d delivery_records=%d",
			x.at, x.fires, x.nasRSS, x.relayRSS, float64(x.usedMemory)/(1<<20), x.dbSize, x.deliveryN)
	}
	// Steady state starts with the first fire: NAS's start-up lines are
	// behind it.
	if !s.waitSlots(1, 30*time.Second) {
		t.Fatal("no fire reached an agent within 30s")
	}
	samples := []soakSample{sample()}
	logSample(samples[0])
	steadyFires, steadyBytes := samples[0].fires, nas.out.written()
	if steadyBytes == 0 {
		t.Fatal("NAS wrote nothing at start-up: its log is not where the soak reads it")
	}
	tick := time.NewTicker(p.sampleEvery)
	end := time.NewTimer(p.duration)
	for running := true; running; {
		select {
		case <-tick.C:
			samples = append(samples, sample())
			logSample(samples[len(samples)-1])
		case <-end.C:
			running = false
		}
	}
	tick.Stop()
	endBytes := nas.out.written()
	last := sample()
	logSample(last)

	// Stop re-arming and let the fires armed last arrive.
	mu.Lock()
	stopping = true
	close(next)
	mu.Unlock()
	workers.Wait()
	if len(armErrs) > 0 {
		t.Fatalf("%d arms failed, the first: %v", len(armErrs), armErrs[0])
	}
	if !s.waitSlots(len(armed), time.Minute) {
		got, _ := s.counts()
		t.Fatalf("%d of %d armed fires reached the agents within a minute of the end", got, len(armed))
	}

	// Exactly once: every armed (job, fire_at) arrived once, and nothing
	// else arrived.
	s.mu.Lock()
	lost, doubled := 0, 0
	for key := range armed {
		switch n := s.arrivals[key]; {
		case n == 0:
			lost++
		case n > 1:
			doubled++
			if doubled <= 5 {
				t.Errorf("slot %s arrived %d times", key, n)
			}
		}
	}
	extra := len(s.arrivals) - (len(armed) - lost)
	s.mu.Unlock()
	t.Logf("fires: %d armed, %d delivered, %d lost, %d doubled, %d not armed; %d tokens failed, %d early",
		len(armed), len(armed)-lost, lost, doubled, extra, s.failed.Load(), s.early.Load())
	if lost > 0 || doubled > 0 || extra > 0 {
		t.Fatalf("%d fires lost, %d doubled, %d arrived unarmed", lost, doubled, extra)
	}
	if n := s.failed.Load(); n > 0 {
		t.Fatalf("%d fire tokens failed verification", n)
	}
	if n := s.early.Load(); n > 0 {
		t.Fatalf("%d fires arrived before their fire_at", n)
	}

	// The rate held: a fire late by more than its interval would have
	// slowed its job.
	if got, want := float64(last.fires-steadyFires)/p.duration.Seconds(), p.rate(); got < 0.9*want {
		t.Fatalf("%.0f fires/s delivered, want about %.0f", got, want)
	}

	// NAS's log at INFO in steady state.
	steady := last.fires - steadyFires
	perFire := float64(endBytes-steadyBytes) / float64(steady)
	t.Logf("NAS wrote %d bytes at INFO over %d fires in steady state: %.3f bytes per fire", endBytes-steadyBytes, steady, perFire)
	if perFire >= maxInfoBytesPerFire {
		t.Fatalf("NAS wrote %.1f bytes per fire at INFO, budget %d:\n%s", perFire, maxInfoBytesPerFire, lastLines(nas.out.String(), 10))
	}
	if soak() {
		// One summary a minute, each on the first event after its period.
		summaries := strings.Count(nas.out.String(), "fires summary")
		if want := int(p.duration/time.Minute) - 1; summaries < want {
			t.Fatalf("NAS wrote %d fires summary lines in %s, want at least %d", summaries, p.duration, want)
		}
	}

	checkLevelled(t, p, samples, last)
}

// checkLevelled fails the test unless the processes' RSS at the end is
// under twice what it was after the first sample period, and the store's
// first-delivery records are bounded by the rate times their TTL (and,
// once the TTL has passed, Redis's memory stopped growing).
func checkLevelled(t *testing.T, p soakPlan, samples []soakSample, last soakSample) {
	t.Helper()
	if len(samples) < 2 {
		t.Fatalf("%d samples: the run is shorter than a sample period", len(samples))
	}
	warm := samples[1]
	if runtime.GOOS == "linux" {
		if last.nasRSS >= 2*warm.nasRSS {
			t.Errorf("NAS RSS grew from %d kB at %s to %d kB", warm.nasRSS, warm.at, last.nasRSS)
		}
		if last.relayRSS >= 2*warm.relayRSS {
			t.Errorf("relay RSS grew from %d kB at %s to %d kB", warm.relayRSS, warm.at, last.relayRSS)
		}
	}
	// A record per relay call, each kept deliveryTTL: at most the rate
	// times the TTL (with a tenth for scheduling noise), and never more
	// than the calls made.
	bound := int64(p.rate() * deliveryTTL.Seconds() * 1.1)
	for _, x := range append(samples, last) {
		if x.deliveryN > bound || x.deliveryN > int64(x.fires)+int64(p.jobs) {
			t.Errorf("t=%s: %d first-delivery records after %d fires, bound %d (%.0f/s × %s)",
				x.at, x.deliveryN, x.fires, bound, p.rate(), deliveryTTL)
		}
	}
	// Before the TTL passes, every call's record is still there: the
	// pattern counts what it should.
	if early := samples[1]; early.at < deliveryTTL && early.deliveryN < int64(early.fires)*9/10 {
		t.Errorf("t=%s: %d first-delivery records after %d fires: the records are not where the soak looks", early.at, early.deliveryN, early.fires)
	}
	// Past the TTL the records expire as fast as they come: the store's
	// memory and records level off.
	var settled *soakSample
	for i := range samples {
		if samples[i].at >= deliveryTTL+time.Minute {
			settled = &samples[i]
			break
		}
	}
	if settled == nil {
		return
	}
	if float64(last.usedMemory) > 1.25*float64(settled.usedMemory) {
		t.Errorf("Redis used_memory grew from %d at %s to %d at the end", settled.usedMemory, settled.at, last.usedMemory)
	}
	if float64(last.deliveryN) > 1.15*float64(settled.deliveryN) {
		t.Errorf("first-delivery records grew from %d at %s to %d at the end", settled.deliveryN, settled.at, last.deliveryN)
	}
}

// startNASAtInfo starts `chronos nas` like startNAS, at NAS's default log
// level (INFO) rather than the fault tests' WARN.
func (c *cluster) startNASAtInfo(name string) (*proc, string) {
	c.t.Helper()
	addr := freeAddr(c.t)
	url := "http://" + addr
	c.nasConfig(name+".yaml", addr, url)
	path := c.dir + "/" + name + ".yaml"
	b, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	conf, n := strings.Replace(string(b), "log_level: warn\n", "", 1), strings.Count(string(b), "log_level: warn\n")
	if n != 1 {
		c.t.Fatalf("%s: no log_level: warn line to drop", path)
	}
	writeFile(c.t, c.dir, name+".yaml", conf)
	p := startProc(c.t, name, c.dir, "nas", "--config", name+".yaml")
	waitReady(c.t, p, url+contract.PathReadyz, 30*time.Second)
	return p, url
}

// provisionRetrying arms f like provision, retrying a failed call as an
// agent's reconcile would, until ctx ends.
func provisionRetrying(ctx context.Context, client *http.Client, nasURL string, a agentCred, callback string, f fire) error {
	for try := 0; ; try++ {
		_, err := provision(ctx, client, nasURL, a, callback, f)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%v (gave up: %w)", err, ctx.Err())
		}
		time.Sleep(time.Duration(min(try+1, 10)) * 20 * time.Millisecond) // agent-side retry backoff
	}
}

// rssKB reads the resident set of p from /proc (0 where there is none).
func rssKB(t *testing.T, p *proc) int64 {
	t.Helper()
	if runtime.GOOS != "linux" {
		return 0
	}
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatalf("status of %s: %v", p.name, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS of %s %q: %v", p.name, v, err)
			}
			return n
		}
	}
	t.Fatalf("status of %s has no VmRSS", p.name)
	return 0
}

// redisUsedMemory reads INFO memory's used_memory.
func redisUsedMemory(ctx context.Context, t *testing.T, c goredis.UniversalClient) int64 {
	t.Helper()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatalf("info memory: %v", err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// redisDBSize reads DBSIZE.
func redisDBSize(ctx context.Context, t *testing.T, c goredis.UniversalClient) int64 {
	t.Helper()
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("dbsize: %v", err)
	}
	return n
}

// countKeys counts the keys matching pattern with SCAN (never KEYS: the
// store serves the run meanwhile).
func countKeys(ctx context.Context, t *testing.T, c goredis.UniversalClient, pattern string) int64 {
	t.Helper()
	var n int64
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s: %v", pattern, err)
	}
	return n
}
