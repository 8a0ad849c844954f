package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/redis"
)

// maxBytesPerArmed is the storage budget of one armed one-shot, row and due
// entry included.
const maxBytesPerArmed = 400

// usedMemory reads INFO memory's used_memory.
func usedMemory(ctx context.Context, t testing.TB, c goredis.UniversalClient) int64 {
	t.Helper()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("info has no used_memory")
	return 0
}

// TestBytesPerArmedOneShot arms realistic one-shots (schedule ids as NAS
// makes them, 32-hex-digit ids, an https callback) on a server of its own and
// holds the per-entry storage to the budget: with fire_at in the canonical UTC
// form, and spelt with an offset as agents such as Hermes write it (the
// spelling is stored with the row).
func TestBytesPerArmedOneShot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		spell func(time.Time) string
	}{
		{"canonical", func(time.Time) string { return "" }},
		{"offset", func(at time.Time) string {
			return at.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000000-07:00")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			per := bytesPerArmed(t, tc.spell)
			t.Logf("%.0f bytes of Redis per armed one-shot", per)
			if per > maxBytesPerArmed {
				t.Fatalf("%.0f bytes per armed one-shot, budget %d", per, maxBytesPerArmed)
			}
		})
	}
}

// bytesPerArmed arms 10000 one-shots on a server of its own, fire_at spelt
// by spell, and returns the Redis memory each takes.
func bytesPerArmed(t *testing.T, spell func(time.Time) string) float64 {
	t.Helper()
	const agents, perAgent = 50, 200
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := redis.Open(ctx, srv.URL(), redis.Options{Prefix: "mem"})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer e.Close()
	c := redistest.ClientOf(t, srv.URL())
	// Load the scripts first: the script cache is not per entry.
	warm := relay.ArmRequest{AgentID: "w", JobID: "w", FireAt: time.Now(), ScheduleID: "w"}
	if _, err := e.Arm(ctx, warm); err != nil {
		t.Fatalf("arm: %v", err)
	}
	if _, err := e.Cancel(ctx, "w", "w"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	before := usedMemory(ctx, t, c)
	at := time.Now().Add(time.Hour)
	for a := range agents {
		agent := fmt.Sprintf("agent-%04d", a)
		for j := range perAgent {
			fireAt := at.Add(time.Duration(j) * time.Millisecond)
			_, err := e.Arm(ctx, relay.ArmRequest{
				AgentID: agent, InstanceID: "inst-" + agent, JobID: fmt.Sprintf("job-%06d", j),
				FireAt: fireAt, FireAtSpelling: spell(fireAt),
				CallbackURL: "https://" + agent + ".agents.example.com",
				ScheduleID:  fmt.Sprintf("sch_%032x", a*perAgent+j),
			})
			if err != nil {
				t.Fatalf("arm: %v", err)
			}
		}
	}
	return float64(usedMemory(ctx, t, c)-before) / (agents * perAgent)
}
