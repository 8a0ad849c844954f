package redis

import (
	"context"
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
	e, err := Open(ctx, redistest.URL(t), Options{Prefix: redistest.Prefix(t), Shards: 1})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	now := time.Now()
	for _, tc := range []struct {
		name     string
		fireAt   time.Time
		cb       string
		spelling string
	}{
		{"short strings", now.Add(time.Hour), "https://a", ""},
		{"spelt fire_at", now.Add(time.Hour), "https://a", "2026-12-01T09:00:00+02:00"},
		{"sub-millisecond fire_at", now.Add(time.Hour + 123456*time.Nanosecond), "https://agent.example.com/cb", ""},
		{"fire_at in the past (negative difference)", now.Add(-48 * time.Hour), strings.Repeat("x", 40), ""},
		{"epoch", time.UnixMilli(0), strings.Repeat("y", 300), "1970-01-01T01:00:00+01:00"},
		{"far future", now.Add(400 * 24 * time.Hour), strings.Repeat("z", 70000), ""},
	} {
		job := strings.ReplaceAll(tc.name, " ", "-")
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", InstanceID: "i", JobID: job, FireAt: tc.fireAt,
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
		o, err := e.Get(ctx, "a", job)
		if err != nil || !o.FireAt.Equal(tc.fireAt) || o.CallbackURL != tc.cb || o.FireAtSpelling != tc.spelling {
			t.Fatalf("%s: get = %v (fire_at %s), %v", tc.name, o.ScheduleID, o.FireAt, err)
		}
	}
	for _, bad := range [][]byte{nil, {0x91}, {0x92, 0xa3, 'a'}, {0x91, 0xc1}, {0x81, 0x01, 0x02}} {
		if _, err := unpackArray(bad); err == nil {
			t.Errorf("unpack %x: no error", bad)
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
