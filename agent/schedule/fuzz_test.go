package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var fuzzZones = []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata", "Pacific/Apia"}

// FuzzParse: Parse never panics or hangs; its errors wrap one sentinel and
// fit on one line; Next always moves strictly forward, quickly.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"*/5 * * * *", "0 9 * * 1-5", "0 0 L * *", "0 0 * * 5L", "0 0 * * 1#2", "*/20 * * * * *",
		"CRON_TZ=America/New_York 30 2 * * *", "TZ=Europe/London @hourly", "0 0 29 2 */7", "0 0 30 2 *",
		"every 90s", "@every 1h30m", "in 30m", "+90s", "2h30m", "2026-06-18T09:00:00Z", "2026-06-18 09:00",
		"every monday 9am", "monday, wednesday at 9:30pm", "noon", "0 0 * * FRI-SUN", "10/20 0 * * *",
	} {
		f.Add(seed, uint8(1), int64(1774000000))
	}
	// The last day of a leap year past the tz tables, where Go's zone bounds misbehave.
	f.Add("*/5 * * * *", uint8(1), time.Date(2048, 12, 31, 12, 0, 0, 0, time.UTC).Unix()+230*366*secondsPerDay)
	f.Add("0 0 29 2 */7", uint8(3), time.Date(2048, 12, 31, 23, 0, 0, 0, time.UTC).Unix()+230*366*secondsPerDay)
	anchor := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	locs := make([]*time.Location, len(fuzzZones))
	for i, z := range fuzzZones {
		locs[i] = loadLoc(f, z)
	}
	f.Fuzz(func(t *testing.T, expr string, zone uint8, afterSec int64) {
		loc := locs[int(zone)%len(locs)]
		start := time.Now()
		s, err := Parse(expr, Options{Location: loc, Anchor: anchor})
		if took := time.Since(start); took > time.Second {
			t.Fatalf("Parse(%q) took %v", expr, took)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNeverFires) {
				t.Fatalf("Parse(%q) error wraps no sentinel: %v", expr, err)
			}
			if strings.ContainsAny(err.Error(), "\n\r") && !strings.ContainsAny(expr, "\n\r") {
				t.Fatalf("Parse(%q) error spans lines: %q", expr, err)
			}
			return
		}
		// Instants from about 1700 to 2300.
		const span = 600 * 366 * secondsPerDay
		after := time.Unix(afterSec%span-230*366*secondsPerDay, afterSec&0x3fffffff)
		start = time.Now()
		cur := after
		for range 4 {
			next, ok := s.Next(cur)
			if !ok {
				break
			}
			if !next.After(cur) {
				t.Fatalf("%q: Next(%v) = %v, not after it", expr, cur, next)
			}
			if next.Location() != s.Location() {
				t.Fatalf("%q: Next in %v, want %v", expr, next.Location(), s.Location())
			}
			cur = next
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("%q: four Next calls took %v", expr, took)
		}
		if s.Describe() == "" || strings.Contains(s.Describe(), "\n") {
			t.Fatalf("%q: Describe() = %q", expr, s.Describe())
		}
	})
}
