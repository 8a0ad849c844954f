package redis

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
)

// TestUnpackMatchesLua decodes rows in Go and in Lua (cmsgpack) and wants
// the same fields, over the value ranges rows hold.
func TestUnpackMatchesLua(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := openOneShard(ctx, t, nil)
	now := time.Now()
	for _, tc := range []struct {
		name     string
		fireAt   time.Time
		cb       string
		spelling string
		flex     time.Duration
	}{
		{"short strings", now.Add(time.Hour), "https://a", "", 0},
		{"spelt fire_at", now.Add(time.Hour), "https://a", "2026-12-01T09:00:00+02:00", 0},
		{"sub-millisecond fire_at", now.Add(time.Hour + 123456*time.Nanosecond), "https://agent.example.com/cb", "", 0},
		{"fire_at in the past (negative difference)", now.Add(-48 * time.Hour), strings.Repeat("x", 40), "", 0},
		{"epoch", time.UnixMilli(0), strings.Repeat("y", 300), "1970-01-01T01:00:00+01:00", 0},
		{"far future", now.Add(400 * 24 * time.Hour), strings.Repeat("z", 70000), "", 0},
		{"flexible window", now.Add(time.Hour), "https://a", "", 10 * time.Minute},
		{"spelt with the widest window", now.Add(time.Hour), "https://a", "2026-12-01T09:00:00+02:00", relay.MaxFlex},
	} {
		job := strings.ReplaceAll(tc.name, " ", "-")
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: job, FireAt: tc.fireAt, Flex: tc.flex,
			FireAtSpelling: tc.spelling, CallbackURL: tc.cb, ScheduleID: "sch-" + job}); err != nil {
			t.Fatalf("%s: arm: %v", tc.name, err)
		}
		lua, err := e.run(ctx, scriptGet, []string{e.k.rows(0, "a")}, "", job)
		if err != nil {
			t.Fatalf("%s: lua get: %v", tc.name, err)
		}
		packed, err := e.c.HGet(ctx, e.k.rows(0, "a"), job).Bytes()
		if err != nil {
			t.Fatalf("%s: hget: %v", tc.name, err)
		}
		got, err := unpackArray(packed)
		if err != nil {
			t.Fatalf("%s: unpack: %v", tc.name, err)
		}
		if !reflect.DeepEqual(got, lua) {
			t.Fatalf("%s: go %v, lua %v", tc.name, got, lua)
		}
		// The typed decoder of claims reads the same one-shot and token.
		want, err := decodeRow("a", job, got)
		if err != nil {
			t.Fatalf("%s: decode row: %v", tc.name, err)
		}
		wantTok, _ := rowToken(got)
		typed, tok, err := decodePackedRow("a", job, string(packed))
		if err != nil || typed != want || tok != wantTok {
			t.Fatalf("%s: decodePackedRow = %+v, %d, %v; want %+v, %d", tc.name, typed, tok, err, want, wantTok)
		}
		o, err := e.Get(ctx, "a", job)
		if err != nil || !o.FireAt.Equal(tc.fireAt) || o.CallbackURL != tc.cb || o.FireAtSpelling != tc.spelling || o.Flex != tc.flex {
			t.Fatalf("%s: get = %v (fire_at %s), %v", tc.name, o.ScheduleID, o.FireAt, err)
		}
	}
	for _, bad := range [][]byte{nil, {0x91}, {0x92, 0xa3, 'a'}, {0x91, 0xc1}, {0x81, 0x01, 0x02}} {
		if _, err := unpackArray(bad); err == nil {
			t.Errorf("unpack %x: no error", bad)
		}
		if _, _, err := decodePackedRow("a", "j", string(bad)); err == nil {
			t.Errorf("decodePackedRow %x: no error", bad)
		}
	}
}

// scriptGet reads the one-shot of (agent, job), decoded by Lua: the oracle
// of the Go decoder.
//
// KEYS[1] rows of the agent
// ARGV[1] now (unused), ARGV[2] job
//
// Returns the row, or an empty array.
var scriptGet = script(`
local v = redis.call('HGET', KEYS[1], ARGV[2])
if not v then return {} end
return cmsgpack.unpack(v)
`)

// TestPackLastFireMatchesLua packs last fire records in Go and in Lua
// (cmsgpack, as the scripts did before records were packed in Go) and wants
// the same bytes, over every string and integer width, and the same
// encoding of each integer width on its own, negative ones included.
func TestPackLastFireMatchesLua(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := redistest.Client(t)
	luaRecord := `return cmsgpack.pack({ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]),
  ARGV[6], ARGV[7], tonumber(ARGV[8]), 0})`
	fire := time.Date(2026, 6, 1, 9, 0, 0, 123456789, time.UTC)
	for _, n := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		f := relay.LastFire{ScheduleID: strings.Repeat("s", n), InstanceID: "inst", CallbackURL: strings.Repeat("c", n),
			FireAt: fire, Outcome: relay.LastFireDelivered, Reason: strings.Repeat("r", n), At: fire.Add(time.Second)}
		want, err := c.Eval(ctx, luaRecord, nil, f.ScheduleID, f.InstanceID, f.CallbackURL, f.FireAt.UnixMilli(),
			f.FireAt.Nanosecond()%1e6, f.Outcome, f.Reason, f.At.UnixMilli()).Text()
		if err != nil {
			t.Fatalf("lua pack: %v", err)
		}
		if got := packLastFire(nil, f); string(got) != want {
			t.Fatalf("strings of %d bytes: go %x, lua %x", n, got, want)
		}
	}
	for _, v := range []int64{0, 1, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, fire.UnixMilli(), 1<<53 - 1,
		-1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, -1 << 53} {
		want, err := c.Eval(ctx, `return cmsgpack.pack(tonumber(ARGV[1]))`, nil, v).Text()
		if err != nil {
			t.Fatalf("lua pack %d: %v", v, err)
		}
		if got := packInt(nil, v); string(got) != want {
			t.Fatalf("%d: go %x, lua %x", v, got, want)
		}
	}
}

// TestPackLeasedRowMatchesClaimedRow packs the row of claimed leases in Go
// and wants the bytes the claim script stored, over rows of every shape
// (spelt and sub-millisecond fire_at, long callback, retried with a last
// error). Then the acks' fence: an ack of a row changed since its claim (an
// arm that moved the callback) is judged by unpacking the row and holds;
// one with a stale token, or without one, is lost.
func TestPackLeasedRowMatchesClaimedRow(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	e := openOneShard(ctx, t, func() time.Time { return clock })
	for _, tc := range []struct {
		name     string
		fireAt   time.Time
		cb       string
		spelling string
		retried  bool
		flex     time.Duration
		direct   bool
	}{
		{"plain", clock.Add(-time.Minute), "https://a", "", false, 0, false},
		{"spelt", clock.Add(-time.Hour), "https://agent.example.com/chronos/fire", "2026-06-01T10:00:00+02:00", false, 0, false},
		{"sub-millisecond", clock.Add(-time.Second + 123456*time.Nanosecond), strings.Repeat("c", 300), "", false, 0, false},
		{"retried", clock.Add(-time.Minute), "https://a", "", true, 0, false},
		{"created later than fire_at", clock.Add(-400 * 24 * time.Hour), "https://a", "", false, 0, false},
		{"flexible window", clock.Add(-time.Minute), "https://a", "", false, time.Hour, false},
		{"spelt, flexible and retried", clock.Add(-time.Hour), "https://a", "2026-06-01T10:00:00+02:00", true, 90 * time.Minute, false},
		{"direct", clock.Add(-time.Minute), "https://a", "", false, 0, true},
		{"direct, spelt, flexible and retried", clock.Add(-time.Hour), "https://a", "2026-06-01T10:00:00+02:00", true, time.Hour, true},
	} {
		job := strings.ReplaceAll(tc.name, " ", "-")
		var direct relay.DirectKey
		if tc.direct {
			direct = relay.DirectKey{Sealed: "v1." + strings.Repeat("s", 90), KeyID: "ck_" + job, MintedAt: clock.Add(-time.Minute)}
		}
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: job, FireAt: tc.fireAt, Flex: tc.flex,
			FireAtSpelling: tc.spelling, CallbackURL: tc.cb, ScheduleID: "sch-" + job, Direct: direct}); err != nil {
			t.Fatalf("%s: arm: %v", tc.name, err)
		}
		l := claimOnly(ctx, t, e)
		if tc.retried {
			if err := e.Nack(ctx, l, 0, "agent answered 503"); err != nil {
				t.Fatalf("%s: nack: %v", tc.name, err)
			}
			clock = clock.Add(time.Millisecond)
			l = claimOnly(ctx, t, e)
			if l.Attempt != 2 || l.LastError == "" {
				t.Fatalf("%s: retried lease %+v", tc.name, l)
			}
		}
		stored, err := e.c.HGet(ctx, e.k.rows(0, "a"), job).Result()
		if err != nil {
			t.Fatalf("%s: hget: %v", tc.name, err)
		}
		if got := packLeasedRow(nil, l); string(got) != stored {
			t.Fatalf("%s: packed %x, stored %x", tc.name, got, stored)
		}
		if err := e.Ack(ctx, l); err != nil {
			t.Fatalf("%s: ack: %v", tc.name, err)
		}
	}

	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: "moved", FireAt: clock,
		CallbackURL: "https://old", ScheduleID: "sch-moved"}); err != nil {
		t.Fatal(err)
	}
	l := claimOnly(ctx, t, e)
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: "moved", FireAt: clock,
		CallbackURL: "https://new", ScheduleID: "sch-moved"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []relay.Lease{withToken(l, l.Token+1), withToken(l, 0)} {
		if err := e.Ack(ctx, bad); !errors.Is(err, relay.ErrLeaseLost) {
			t.Fatalf("ack with token %d: %v, want a lost lease", bad.Token, err)
		}
	}
	if err := e.Ack(ctx, l); err != nil {
		t.Fatalf("ack of a row changed since its claim: %v", err)
	}
	if err := e.Ack(ctx, l); !errors.Is(err, relay.ErrLeaseLost) {
		t.Fatalf("second ack: %v, want a lost lease", err)
	}
}

// claimOnly claims the one due lease.
func claimOnly(ctx context.Context, t *testing.T, e *Engine) relay.Lease {
	t.Helper()
	ls, err := e.Claim(ctx, 10, time.Minute, relay.Flow{})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %d leases, %v; want 1", len(ls), err)
	}
	return ls[0]
}

// withToken is l with another fencing token.
func withToken(l relay.Lease, tok int64) relay.Lease {
	l.Token = tok
	return l
}
