package redis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// ctxFor returns a context that ends with the test or after d.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// keysOf lists every key under prefix.
func keysOf(ctx context.Context, t *testing.T, c goredis.UniversalClient, prefix string) []string {
	t.Helper()
	var out []string
	iter := c.Scan(ctx, 0, "{chronos:"+prefix+":*", 500).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan: %v", err)
	}
	return out
}

// TestKeysShardedUnderHashTags runs every kind of transition over many agents
// and checks the layout: every key is under a hash tag of a shard or of the
// control keys, the agents spread over all shards, and an agent's keys all
// share its shard's slot.
func TestKeysShardedUnderHashTags(t *testing.T) {
	t.Parallel()
	const shards, agents = 8, 64
	e := newEngine(t, redis.Options{Shards: shards})
	c := redistest.Client(t)
	ctx := ctxFor(t, 30*time.Second)
	past := time.Now().Add(-time.Second)
	for a := range agents {
		agent := fmt.Sprintf("agent-%d", a)
		for _, job := range []string{"acked", "killed", "armed"} {
			if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: agent, InstanceID: "i-" + agent, JobID: job, FireAt: past, ScheduleID: agent + "/" + job}); err != nil {
				t.Fatalf("arm: %v", err)
			}
		}
	}
	claimed := 0
	for {
		ls, err := e.Claim(ctx, 50, time.Minute, relay.Flow{})
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		if len(ls) == 0 {
			break
		}
		for _, l := range ls {
			claimed++
			switch l.JobID {
			case "acked":
				err = e.Ack(ctx, l)
			case "killed":
				err = e.Kill(ctx, l, "gave up")
			default:
				err = e.Nack(ctx, l, time.Hour, "later")
			}
			if err != nil {
				t.Fatalf("%s: %v", l.JobID, err)
			}
		}
	}
	if claimed != 3*agents {
		t.Fatalf("claimed %d across shards, want %d", claimed, 3*agents)
	}
	if _, err := e.FirstDelivery(ctx, "delivery-1", time.Minute); err != nil {
		t.Fatalf("first delivery: %v", err)
	}
	if err := e.SetInstanceState(ctx, "i-agent-1", relay.InstanceStopped); err != nil {
		t.Fatalf("stop: %v", err)
	}

	tag := regexp.MustCompile(`^\{chronos:` + regexp.QuoteMeta(e.Prefix()) + `:(ctl|[0-9]+)\}:`)
	perShard := map[string]int{}
	for _, k := range keysOf(ctx, t, c, e.Prefix()) {
		m := tag.FindStringSubmatch(k)
		if m == nil {
			t.Fatalf("key %q is not under a shard or control hash tag", k)
		}
		if strings.Contains(k, ":a:") {
			perShard[m[1]]++
		}
	}
	if len(perShard) != shards {
		t.Fatalf("agent rows in %d shards, want all %d: %v", len(perShard), shards, perShard)
	}
	for a := range agents {
		agent := fmt.Sprintf("agent-%d", a)
		tags := map[string]bool{}
		for _, k := range keysOf(ctx, t, c, e.Prefix()) {
			if strings.HasSuffix(k, ":"+agent) {
				tags[k[:strings.Index(k, "}")+1]] = true
			}
		}
		if len(tags) != 1 {
			t.Fatalf("keys of %s under %d hash tags (%v), want 1", agent, len(tags), tags)
		}
	}
}

// TestConcurrentTransitionsKeepRowsAndEntriesTogether races arms, re-arms,
// cancels, claims, acks and nacks on a few hot jobs and then checks the
// invariant every script keeps: each row has exactly one due-or-lease entry
// and every entry has its row.
func TestConcurrentTransitionsKeepRowsAndEntriesTogether(t *testing.T) {
	t.Parallel()
	e := newEngine(t, redis.Options{Shards: 2})
	ctx := ctxFor(t, 30*time.Second)
	const workers, rounds = 6, 150
	var wg sync.WaitGroup
	errs := make(chan error, workers*2)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				agent := fmt.Sprintf("a%d", i%3)
				job := fmt.Sprintf("j%d", (i+w)%5)
				var err error
				switch (i + w) % 4 {
				case 0, 1:
					_, err = e.Arm(ctx, relay.ArmRequest{AgentID: agent, JobID: job,
						FireAt: time.Now().Add(time.Duration(i%3-1) * time.Second), ScheduleID: fmt.Sprintf("s-%d-%d", w, i)})
				case 2:
					_, err = e.Cancel(ctx, agent, job)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Go(func() {
			for i := range rounds {
				ls, err := e.Claim(ctx, 3, time.Minute, relay.Flow{})
				if err != nil {
					errs <- err
					return
				}
				for _, l := range ls {
					if i%2 == 0 {
						err = e.Ack(ctx, l)
					} else {
						err = e.Nack(ctx, l, 0, "again")
					}
					// A re-arm or cancel may have taken the one-shot away.
					if err != nil && !errors.Is(err, relay.ErrLeaseLost) {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent transition: %v", err)
	}

	c := redistest.Client(t)
	rows := 0
	for _, k := range keysOf(ctx, t, c, e.Prefix()) {
		if !strings.Contains(k, ":a:") {
			continue
		}
		agent := k[strings.LastIndex(k, ":a:")+3:]
		shard := k[:strings.Index(k, "}")+1]
		jobs, err := c.HKeys(ctx, k).Result()
		if err != nil {
			t.Fatalf("hkeys: %v", err)
		}
		for _, job := range jobs {
			rows++
			m := fmt.Sprintf("%d:%s%s", len(agent), agent, job)
			_, errDue := c.ZScore(ctx, shard+":due", m).Result()
			_, errLease := c.ZScore(ctx, shard+":lease", m).Result()
			if (errDue == nil) == (errLease == nil) {
				t.Fatalf("row %s/%s: in due %v, in lease %v; want exactly one", agent, job, errDue == nil, errLease == nil)
			}
		}
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.Armed != int64(rows) {
		t.Fatalf("%d due-or-lease entries for %d rows", st.Armed, rows)
	}
}

// TestShardCountIsFixed refuses to open data written with another shard count.
func TestShardCountIsFixed(t *testing.T) {
	t.Parallel()
	prefix := redistest.Prefix(t)
	ctx := ctxFor(t, 10*time.Second)
	e, err := redis.Open(ctx, redistest.URL(t), redis.Options{Prefix: prefix, Shards: 4})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	_ = e.Close()
	for _, tc := range []struct {
		shards int
		ok     bool
	}{{4, true}, {8, false}, {1, false}} {
		e, err := redis.Open(ctx, redistest.URL(t), redis.Options{Prefix: prefix, Shards: tc.shards})
		if (err == nil) != tc.ok {
			t.Fatalf("open with %d shards: err %v, want ok=%v", tc.shards, err, tc.ok)
		}
		if err == nil {
			_ = e.Close()
		}
	}
}

// TestRestartWithAOFKeepsAcknowledgedArms kills redis-server (append-only
// file, fsync always) while arms and claims are under way and restarts it:
// every arm that returned success is still armed or leased afterwards, and
// calls made while it was down succeeded once it was back.
func TestRestartWithAOFKeepsAcknowledgedArms(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{AOF: true})
	ctx := ctxFor(t, 60*time.Second)
	retrying := make(chan struct{}, 1)
	logger := slog.New(&signalHandler{msg: "redis call failed, retrying", ch: retrying})
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "aof", RetryFor: 30 * time.Second, Logger: logger})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()

	const n = 400
	var (
		mu    sync.Mutex
		acked = map[string]string{} // job → schedule id acknowledged as armed
	)
	killed := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if i == n/3 {
				close(killed)
			}
			job := fmt.Sprintf("j%03d", i)
			res, err := e.Arm(ctx, relay.ArmRequest{AgentID: fmt.Sprintf("a%d", i%5), JobID: job,
				FireAt: time.Now().Add(time.Hour), ScheduleID: "s-" + job})
			if err != nil {
				t.Errorf("arm %s: %v", job, err)
				return
			}
			mu.Lock()
			acked[fmt.Sprintf("a%d/%s", i%5, job)] = res.OneShot.ScheduleID
			mu.Unlock()
		}
	})
	<-killed
	if err := srv.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	// While Redis is down a claim waits and retries rather than failing.
	claimed := make(chan error, 1)
	go func() {
		_, err := e.Claim(ctx, 10, time.Minute, relay.Flow{})
		claimed <- err
	}()
	select { // the engine is retrying against the dead server
	case <-retrying:
	case <-ctx.Done():
		t.Fatal("no retry while redis-server was down")
	}
	if err := srv.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	wg.Wait()
	if err := <-claimed; err != nil {
		t.Fatalf("claim across the restart: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) != n {
		t.Fatalf("%d arms acknowledged, want %d", len(acked), n)
	}
	for key, sid := range acked {
		agent, job, _ := strings.Cut(key, "/")
		got, err := e.Get(ctx, agent, job)
		if err != nil {
			t.Fatalf("acknowledged arm %s lost across the restart: %v", key, err)
		}
		if got.ScheduleID != sid {
			t.Fatalf("%s: schedule id %s, want %s", key, got.ScheduleID, sid)
		}
	}
	st, err := e.Stats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	if st.Armed != n {
		t.Fatalf("armed %d after the restart, want %d", st.Armed, n)
	}
}

// signalHandler is a slog handler that signals ch when a record with message
// msg is logged.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }
