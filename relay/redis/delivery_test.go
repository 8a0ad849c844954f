package redis_test

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// TestLookupDeliveryMatchesTheThreeCalls checks the relay route's one-call
// lookup against FirstDelivery, Get and InstanceStopped, on Redis's clock
// (the pipelined path) and on an injected clock (the scripted one).
func TestLookupDeliveryMatchesTheThreeCalls(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string]redis.Options{
		"redis clock": {},
		"test clock":  {Now: time.Now},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEngine(t, opts)
			ctx := ctxFor(t, 30*time.Second)
			at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i-a", JobID: "j", FireAt: at,
				CallbackURL: "http://agent.test", ScheduleID: "s1"}); err != nil {
				t.Fatal(err)
			}
			want, err := e.Get(ctx, "a", "j")
			if err != nil {
				t.Fatal(err)
			}

			info, err := e.LookupDelivery(ctx, "d1", time.Minute, "a", "j")
			if err != nil || !info.First || !info.Found || info.Stopped || info.Row != want {
				t.Fatalf("first lookup: %+v, %v; want the row %+v", info, err, want)
			}
			// The id is now recorded (in the agent's shard).
			if info, err := e.LookupDelivery(ctx, "d1", time.Minute, "a", "j"); err != nil || info.First {
				t.Fatalf("replayed lookup: %+v, %v; want not first", info, err)
			}

			// Not armed.
			if info, err := e.LookupDelivery(ctx, "d3", time.Minute, "a", "nope"); err != nil || !info.First || info.Found {
				t.Fatalf("lookup of an unarmed job: %+v, %v", info, err)
			}

			// Another instance stopped: still not stopped; its own: stopped.
			if err := e.SetInstanceState(ctx, "i-other", relay.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			if info, err := e.LookupDelivery(ctx, "d4", time.Minute, "a", "j"); err != nil || !info.Found || info.Stopped {
				t.Fatalf("lookup with another instance stopped: %+v, %v", info, err)
			}
			if err := e.SetInstanceState(ctx, "i-a", relay.InstanceStopped); err != nil {
				t.Fatal(err)
			}
			if info, err := e.LookupDelivery(ctx, "d5", time.Minute, "a", "j"); err != nil || !info.Found || !info.Stopped {
				t.Fatalf("lookup with the instance stopped: %+v, %v", info, err)
			}
		})
	}
}

// maxBytesPerDeliveryRecord is the storage budget of one first-delivery
// record: NAS keeps one per relay call for its whole TTL, so at a steady
// rate the records are rate × TTL of these.
const maxBytesPerDeliveryRecord = 210

// TestBytesPerDeliveryRecord records 10000 delivery ids as NAS's relay route
// makes them (schedule id, a dot, the fencing token) on a server of its own
// and holds each record's storage, key, value and expiry, to the budget.
func TestBytesPerDeliveryRecord(t *testing.T) {
	t.Parallel()
	const n = 10000
	srv := redistest.Start(t, redistest.Options{})
	ctx := ctxFor(t, 2*time.Minute)
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "default"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	c := redistest.ClientOf(t, srv.URL())
	if _, err := e.LookupDelivery(ctx, "warm", time.Minute, "a", "j"); err != nil {
		t.Fatalf("lookup: %v", err)
	}
	before := usedMemory(ctx, t, c)
	for i := range n {
		id := fmt.Sprintf("sch_%032x.%d", i*7919, 1_000_000+i)
		info, err := e.LookupDelivery(ctx, id, 11*time.Minute, "agent-01", "job")
		if err != nil || !info.First {
			t.Fatalf("lookup %s: %+v, %v", id, info, err)
		}
	}
	per := float64(usedMemory(ctx, t, c)-before) / n
	t.Logf("%.0f bytes of Redis per first-delivery record", per)
	if per > maxBytesPerDeliveryRecord {
		t.Fatalf("%.0f bytes per first-delivery record, budget %d", per, maxBytesPerDeliveryRecord)
	}
}

// TestDeliveryRecordOfAnEarlierRelease checks that a record as earlier
// releases wrote it (a 24-hex-digit nonce; with the expiry first on an
// injected clock) still makes its delivery id a repeat: processes of both
// releases share a store during an upgrade.
func TestDeliveryRecordOfAnEarlierRelease(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts  redis.Options
		value func(now time.Time) string
	}{
		"redis clock": {redis.Options{}, func(time.Time) string { return "0123456789abcdef01234567" }},
		"test clock": {redis.Options{Now: time.Now}, func(now time.Time) string {
			return strconv.FormatInt(now.Add(time.Minute).UnixMilli(), 10) + " 0123456789abcdef01234567"
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.opts.Prefix = redistest.Prefix(t)
			e := newEngine(t, tc.opts)
			ctx := ctxFor(t, 30*time.Second)
			c := redistest.Client(t)
			const id = "sch_00000000000000000000000000000001.7"
			if first, err := e.FirstDelivery(ctx, id, time.Minute); err != nil || !first {
				t.Fatalf("FirstDelivery: %v, %v", first, err)
			}
			var key string
			for _, k := range keysOf(ctx, t, c, tc.opts.Prefix) {
				if strings.HasSuffix(k, ":dd:"+id) {
					key = k
				}
			}
			if key == "" {
				t.Fatalf("no record of %s", id)
			}
			if err := c.Set(ctx, key, tc.value(time.Now()), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if first, err := e.FirstDelivery(ctx, id, time.Minute); err != nil || first {
				t.Fatalf("FirstDelivery over an earlier release's record: %v, %v; want not first", first, err)
			}
			// LookupDelivery keeps its record in the agent's shard: the same
			// holds for it.
			if info, err := e.LookupDelivery(ctx, id, time.Minute, "a", "j"); err != nil || !info.First {
				t.Fatalf("LookupDelivery: %+v, %v", info, err)
			}
			key = "{chronos:" + tc.opts.Prefix + ":" + shardOfA(tc.opts) + "}:dd:" + id
			if !slices.Contains(keysOf(ctx, t, c, tc.opts.Prefix), key) {
				t.Fatalf("no record %s", key)
			}
			if err := c.Set(ctx, key, tc.value(time.Now()), time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if info, err := e.LookupDelivery(ctx, id, time.Minute, "a", "j"); err != nil || info.First {
				t.Fatalf("LookupDelivery over an earlier release's record: %+v, %v; want not first", info, err)
			}
		})
	}
}

// shardOfA is the shard of agent "a" under opts, as the engine spreads
// agents (FNV-1a of the id modulo the shard count).
func shardOfA(opts redis.Options) string {
	n := opts.Shards
	if n == 0 {
		n = redis.DefaultShards
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte("a"))
	return strconv.Itoa(int(h.Sum32() % uint32(n)))
}
