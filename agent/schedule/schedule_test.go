package schedule

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// nextCase: parse expr in zone tz anchored at after, then chain Next from
// after; the fires must be exactly want (fewer when the schedule ends).
type nextCase struct {
	name  string
	expr  string
	tz    string // Options.Location; "" = UTC
	after string // RFC 3339; also the anchor
	want  []string
}

func loadLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	if name == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("parse time %q: %v", s, err)
	}
	return v
}

func runNextCases(t *testing.T, cases []nextCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			after := mustTime(t, tc.after)
			s, err := Parse(tc.expr, Options{Location: loadLoc(t, tc.tz), Anchor: after})
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.expr, err)
			}
			var got []string
			cur := after
			for range len(tc.want) + 1 {
				next, ok := s.Next(cur)
				if !ok {
					break
				}
				if !next.After(cur) {
					t.Fatalf("Next(%s) = %s, not after it", cur.Format(time.RFC3339), next.Format(time.RFC3339))
				}
				got = append(got, next.Format(time.RFC3339Nano))
				cur = next
			}
			if len(got) > len(tc.want) {
				got = got[:len(tc.want)]
				if s.Kind() == KindOnce {
					t.Errorf("one-shot fired more than once")
				}
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("%s (%s)\n got: %v\nwant: %v", tc.expr, s.Describe(), got, tc.want)
			}
		})
	}
}

func TestNextForms(t *testing.T) {
	t.Parallel()
	const jan1 = "2026-01-01T00:00:00Z" // a Thursday
	runNextCases(t, []nextCase{
		{"every 15 minutes", "*/15 * * * *", "", jan1, []string{"2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:45:00Z"}},
		{"weekdays numeric", "0 9 * * 1-5", "", jan1, []string{"2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z", "2026-01-05T09:00:00Z"}},
		{"weekdays by name", "0 9 * * MON-FRI", "", jan1, []string{"2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z", "2026-01-05T09:00:00Z"}},
		{"month names mixed case", "0 0 1 jan,Jul *", "", jan1, []string{"2026-07-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"5-7 includes sunday", "0 0 * * 5-7", "", jan1, []string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"FRI-SUN includes sunday", "0 0 * * FRI-SUN", "", jan1, []string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z", "2026-01-09T00:00:00Z"}},
		{"7 is sunday", "0 0 * * 7", "", jan1, []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"range with step", "30 10-14/2 * * *", "", jan1, []string{"2026-01-01T10:30:00Z", "2026-01-01T12:30:00Z", "2026-01-01T14:30:00Z", "2026-01-02T10:30:00Z"}},
		{"list", "5,10 0 * * *", "", jan1, []string{"2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z", "2026-01-02T00:05:00Z"}},
		{"start with step", "10/20 0 * * *", "", jan1, []string{"2026-01-01T00:10:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:50:00Z", "2026-01-02T00:10:00Z"}},
		{"last day of month", "0 0 L * *", "", jan1, []string{"2026-01-31T00:00:00Z", "2026-02-28T00:00:00Z", "2026-03-31T00:00:00Z", "2026-04-30T00:00:00Z"}},
		{"last day of february", "0 0 L 2 *", "", jan1, []string{"2026-02-28T00:00:00Z", "2027-02-28T00:00:00Z", "2028-02-29T00:00:00Z"}},
		{"second monday", "0 0 * * 1#2", "", jan1, []string{"2026-01-12T00:00:00Z", "2026-02-09T00:00:00Z", "2026-03-09T00:00:00Z"}},
		{"last friday", "0 0 * * 5L", "", jan1, []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z", "2026-03-27T00:00:00Z"}},
		{"last friday by name", "0 0 * * friL", "", jan1, []string{"2026-01-30T00:00:00Z", "2026-02-27T00:00:00Z"}},
		{"seconds field", "*/20 * * * * *", "", jan1, []string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"seconds fixed", "30 0 9 * * *", "", jan1, []string{"2026-01-01T09:00:30Z", "2026-01-02T09:00:30Z"}},
		{"@yearly", "@yearly", "", jan1, []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
		{"@annually", "@annually", "", jan1, []string{"2027-01-01T00:00:00Z"}},
		{"@monthly", "@monthly", "", jan1, []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@weekly", "@weekly", "", jan1, []string{"2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z"}},
		{"@daily", "@daily", "", jan1, []string{"2026-01-02T00:00:00Z"}},
		{"@midnight", "@MIDNIGHT", "", jan1, []string{"2026-01-02T00:00:00Z"}},
		{"@hourly", "@hourly", "", jan1, []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"CRON_TZ prefix", "CRON_TZ=Asia/Kolkata 0 9 * * *", "", jan1, []string{"2026-01-01T09:00:00+05:30", "2026-01-02T09:00:00+05:30"}},
		{"TZ prefix wins over location", "TZ=Europe/Paris 0 9 * * *", "America/New_York", jan1, []string{"2026-01-01T09:00:00+01:00"}},
		{"location applies", "0 9 * * *", "America/New_York", jan1, []string{"2026-01-01T09:00:00-05:00"}},
		{"after with fraction", "* * * * *", "", "2026-01-01T00:00:00.5Z", []string{"2026-01-01T00:01:00Z"}},

		// Rule 1: day matching.
		{"dom range or monday is every day", "0 0 1-31 * 1", "", jan1, []string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z"}},
		{"odd days that are mondays", "0 0 */2 * 1", "", jan1, []string{"2026-01-05T00:00:00Z", "2026-01-19T00:00:00Z", "2026-02-09T00:00:00Z", "2026-02-23T00:00:00Z"}},
		{"every monday in february", "0 0 30 2 1", "", jan1, []string{"2026-02-02T00:00:00Z", "2026-02-09T00:00:00Z", "2026-02-16T00:00:00Z", "2026-02-23T00:00:00Z", "2027-02-01T00:00:00Z"}},
		{"13th or friday", "0 0 13 * 5", "", jan1, []string{"2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z", "2026-01-13T00:00:00Z", "2026-01-16T00:00:00Z"}},
		{"feb 29 or monday in feb", "0 0 29 2 1", "", "2027-12-31T00:00:00Z", []string{"2028-02-07T00:00:00Z", "2028-02-14T00:00:00Z", "2028-02-21T00:00:00Z", "2028-02-28T00:00:00Z", "2028-02-29T00:00:00Z"}},

		// Leap days and short months.
		{"leap day", "0 0 29 2 *", "", jan1, []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"leap day skips 2100", "0 0 29 2 *", "", "2096-03-01T00:00:00Z", []string{"2104-02-29T00:00:00Z"}},
		{"feb 29 on a sunday", "0 0 29 2 */7", "", jan1, []string{"2032-02-29T00:00:00Z", "2060-02-29T00:00:00Z", "2088-02-29T00:00:00Z", "2128-02-29T00:00:00Z", "2156-02-29T00:00:00Z"}},
		{"fifth sunday of february", "0 0 * 2 0#5", "", "2088-03-01T00:00:00Z", []string{"2128-02-29T00:00:00Z"}},
		{"fifth monday of february", "0 0 0 * 2 1#5", "", jan1, []string{"2044-02-29T00:00:00Z", "2072-02-29T00:00:00Z"}},
		{"last day or fifth friday", "0 0 0 L 2 5#5", "", jan1, []string{"2026-02-28T00:00:00Z", "2027-02-28T00:00:00Z", "2028-02-29T00:00:00Z", "2029-02-28T00:00:00Z"}},
		{"31st skips short months", "0 0 31 * *", "", jan1, []string{"2026-01-31T00:00:00Z", "2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z", "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z"}},
		{"30th skips february", "0 0 30 * *", "", jan1, []string{"2026-01-30T00:00:00Z", "2026-03-30T00:00:00Z"}},

		// Intervals: anchor + k·d, k ≥ 1.
		{"every 90s", "every 90s", "", jan1, []string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"}},
		{"every 15m", "every 15m", "", jan1, []string{"2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z"}},
		{"every 2h", "every 2h", "", jan1, []string{"2026-01-01T02:00:00Z"}},
		{"every 1d across DST keeps 24h", "every 1d", "America/New_York", "2026-03-07T12:00:00-05:00", []string{"2026-03-08T13:00:00-04:00", "2026-03-09T13:00:00-04:00"}},
		{"@every", "@every 1h30m", "", jan1, []string{"2026-01-01T01:30:00Z"}},
		{"every words", "every 2 hours", "", jan1, []string{"2026-01-01T02:00:00Z"}},

		// One-shots.
		{"in 30m", "in 30m", "", jan1, []string{"2026-01-01T00:30:00Z"}},
		{"bare 30m", "30m", "", jan1, []string{"2026-01-01T00:30:00Z"}},
		{"plus 90s", "+90s", "", jan1, []string{"2026-01-01T00:01:30Z"}},
		{"2h30m", "2h30m", "", jan1, []string{"2026-01-01T02:30:00Z"}},
		{"rfc3339", "2026-06-18T09:00:00+02:00", "", jan1, []string{"2026-06-18T07:00:00Z"}},
		{"rfc3339 in zone", "2026-06-18T09:00:00+02:00", "Europe/Paris", jan1, []string{"2026-06-18T09:00:00+02:00"}},
		{"local timestamp", "2026-06-18 09:00", "Europe/Paris", jan1, []string{"2026-06-18T09:00:00+02:00"}},
		{"local timestamp prefix", "TZ=Asia/Kolkata 2026-06-18 09:00:30", "", jan1, []string{"2026-06-18T09:00:30+05:30"}},
		{"local timestamp in gap", "2026-03-08 02:30", "America/New_York", jan1, []string{"2026-03-08T03:00:00-04:00"}},
		{"local timestamp repeated", "2026-11-01 01:30", "America/New_York", jan1, []string{"2026-11-01T01:30:00-04:00"}},
		{"passed one-shot", "2025-06-18T09:00:00Z", "", jan1, nil},

		// Phrases.
		{"every monday 9am", "every monday 9am", "", jan1, []string{"2026-01-05T09:00:00Z", "2026-01-12T09:00:00Z"}},
		{"every day at 9:30pm", "every day at 9:30pm", "", jan1, []string{"2026-01-01T21:30:00Z", "2026-01-02T21:30:00Z"}},
		{"weekdays at 9am", "weekdays at 9am", "", jan1, []string{"2026-01-01T09:00:00Z", "2026-01-02T09:00:00Z", "2026-01-05T09:00:00Z"}},
		{"weekends at 10am", "weekends at 10am", "", jan1, []string{"2026-01-03T10:00:00Z", "2026-01-04T10:00:00Z", "2026-01-10T10:00:00Z"}},
		{"daily at 7am", "daily at 7am", "", jan1, []string{"2026-01-01T07:00:00Z", "2026-01-02T07:00:00Z"}},
		{"monday, wednesday at 9am", "monday, wednesday at 9am", "", jan1, []string{"2026-01-05T09:00:00Z", "2026-01-07T09:00:00Z", "2026-01-12T09:00:00Z"}},
		{"noon", "noon", "", jan1, []string{"2026-01-01T12:00:00Z", "2026-01-02T12:00:00Z"}},
		{"midnight", "midnight", "", jan1, []string{"2026-01-02T00:00:00Z"}},
		{"24h clock", "every friday at 17:45", "Europe/London", jan1, []string{"2026-01-02T17:45:00Z"}},
		{"12am is midnight", "every day at 12am", "", jan1, []string{"2026-01-02T00:00:00Z"}},
		{"phrase with prefix", "CRON_TZ=Europe/Paris every monday 9am", "", jan1, []string{"2026-01-05T09:00:00+01:00"}},
	})
}

// TestNextDST covers rules 2–6 on real DST days.
func TestNextDST(t *testing.T) {
	t.Parallel()
	const ny, london, lhi, scl = "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago"
	runNextCases(t, []nextCase{
		// New York 2026: 03-08 02:00 EST → 03:00 EDT; 11-01 02:00 EDT → 01:00 EST.
		{"ny fixed in gap fires after it", "30 2 * * *", ny, "2026-03-07T12:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"ny fixed at gap start", "0 2 * * *", ny, "2026-03-07T12:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"ny several matches in gap fire once", "0,15,30,45 2 * * *", ny, "2026-03-08T01:50:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"ny gap and 3:00 fire once", "0 2,3 * * *", ny, "2026-03-08T01:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{"ny after the last second before gap", "30 2 * * *", ny, "2026-03-08T01:59:59-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"ny after a fraction before gap", "30 2 * * *", ny, "2026-03-08T01:59:59.5-05:00", []string{"2026-03-08T03:00:00-04:00"}},
		{"ny after inside gap instant", "30 2 * * *", ny, "2026-03-08T03:00:00-04:00", []string{"2026-03-09T02:30:00-04:00"}},
		{"ny fixed seconds in gap", "15 30 2 * * *", ny, "2026-03-08T01:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:15-04:00"}},
		{"ny wildcard follows wall clock", "*/30 * * * *", ny, "2026-03-08T01:00:00-05:00", []string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"}},
		{"ny wildcard hour star", "30 * * * *", ny, "2026-03-08T01:00:00-05:00", []string{"2026-03-08T01:30:00-05:00", "2026-03-08T03:30:00-04:00"}},
		{"ny wildcard minute star skipped", "*/30 2 * * *", ny, "2026-03-07T12:00:00-05:00", []string{"2026-03-09T02:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"ny @hourly spring", "@hourly", ny, "2026-03-08T00:30:00-05:00", []string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"ny fixed repeated fires first pass", "30 1 * * *", ny, "2026-10-31T12:00:00-04:00", []string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"ny fixed after inside second pass", "30 1 * * *", ny, "2026-11-01T01:10:00-05:00", []string{"2026-11-02T01:30:00-05:00"}},
		{"ny fixed after between passes", "30 1 * * *", ny, "2026-11-01T01:45:00-04:00", []string{"2026-11-02T01:30:00-05:00"}},
		{"ny fixed after first pass fire", "30 1 * * *", ny, "2026-11-01T01:30:00-04:00", []string{"2026-11-02T01:30:00-05:00"}},
		{"ny fixed hour after repeat", "0 2 * * *", ny, "2026-11-01T01:30:00-05:00", []string{"2026-11-01T02:00:00-05:00"}},
		{"ny wildcard repeated fires twice", "*/30 1 * * *", ny, "2026-11-01T00:50:00-04:00", []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-02T01:00:00-05:00"}},
		{"ny wildcard after inside second pass", "*/30 1 * * *", ny, "2026-11-01T01:10:00-05:00", []string{"2026-11-01T01:30:00-05:00", "2026-11-02T01:00:00-05:00"}},
		{"ny @hourly fall", "@hourly", ny, "2026-11-01T00:30:00-04:00", []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"}},
		{"ny six-field wildcard", "0 */30 * * * *", ny, "2026-11-01T01:20:00-04:00", []string{"2026-11-01T01:30:00-04:00", "2026-11-01T01:00:00-05:00"}},

		// London 2026: 03-29 01:00 GMT → 02:00 BST; 10-25 02:00 BST → 01:00 GMT.
		{"london fixed in gap", "30 1 * * *", london, "2026-03-28T12:00:00Z", []string{"2026-03-29T02:00:00+01:00", "2026-03-30T01:30:00+01:00"}},
		{"london fixed repeated", "30 1 * * *", london, "2026-10-24T12:00:00+01:00", []string{"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"}},
		{"london wildcard repeated", "15 * * * *", london, "2026-10-25T00:30:00+01:00", []string{"2026-10-25T01:15:00+01:00", "2026-10-25T01:15:00Z", "2026-10-25T02:15:00Z"}},
		{"london weekly sunday 1:30", "30 1 * * 0", london, "2026-03-22T12:00:00Z", []string{"2026-03-29T02:00:00+01:00", "2026-04-05T01:30:00+01:00"}},

		// Lord Howe 2026: 04-05 02:00 (+11) → 01:30 (+10:30); 10-04 02:00 (+10:30) → 02:30 (+11).
		{"lord howe fixed in half-hour gap", "15 2 * * *", lhi, "2026-10-03T12:00:00+10:30", []string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"lord howe fixed just after gap", "45 2 * * *", lhi, "2026-10-03T12:00:00+10:30", []string{"2026-10-04T02:45:00+11:00"}},
		{"lord howe wildcard across gap", "*/15 * * * *", lhi, "2026-10-04T01:40:00+10:30", []string{"2026-10-04T01:45:00+10:30", "2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00"}},
		{"lord howe fixed repeated", "45 1 * * *", lhi, "2026-04-04T12:00:00+11:00", []string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"lord howe fixed before repeat", "15 1 * * *", lhi, "2026-04-04T12:00:00+11:00", []string{"2026-04-05T01:15:00+11:00", "2026-04-06T01:15:00+10:30"}},
		{"lord howe wildcard repeated", "*/15 1 * * *", lhi, "2026-04-05T01:20:00+11:00", []string{"2026-04-05T01:30:00+11:00", "2026-04-05T01:45:00+11:00", "2026-04-05T01:30:00+10:30", "2026-04-05T01:45:00+10:30", "2026-04-06T01:00:00+10:30"}},

		// Santiago 2026: 04-05 00:00 (-03) → 04-04 23:00 (-04); 09-06 00:00 (-04) → 01:00 (-03).
		{"santiago midnight in gap", "0 0 * * *", scl, "2026-09-05T12:00:00-04:00", []string{"2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"}},
		{"santiago 0:30 in gap", "30 0 * * *", scl, "2026-09-05T12:00:00-04:00", []string{"2026-09-06T01:00:00-03:00", "2026-09-07T00:30:00-03:00"}},
		{"santiago date of the gap", "0 0 6 9 *", scl, "2026-09-05T12:00:00-04:00", []string{"2026-09-06T01:00:00-03:00", "2027-09-06T00:00:00-03:00"}},
		{"santiago day before gap", "0 0 5 9 *", scl, "2026-01-01T00:00:00-03:00", []string{"2026-09-05T00:00:00-04:00"}},
		{"santiago wildcard across midnight gap", "0 * * * *", scl, "2026-09-05T22:30:00-04:00", []string{"2026-09-05T23:00:00-04:00", "2026-09-06T01:00:00-03:00", "2026-09-06T02:00:00-03:00"}},
		{"santiago fixed repeated", "30 23 * * *", scl, "2026-04-04T12:00:00-03:00", []string{"2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"}},
		{"santiago fixed inside second pass", "30 23 * * *", scl, "2026-04-04T23:10:00-04:00", []string{"2026-04-05T23:30:00-04:00"}},
		{"santiago wildcard repeated", "30 * * * *", scl, "2026-04-04T22:45:00-03:00", []string{"2026-04-04T23:30:00-03:00", "2026-04-04T23:30:00-04:00", "2026-04-05T00:30:00-04:00"}},

		// Rule 5: Apia skipped 2011-12-30 entirely (a 24 h jump): a correction, not run.
		{"apia fixed skipped day not run", "0 12 * * *", "Pacific/Apia", "2011-12-29T00:00:00-10:00", []string{"2011-12-29T12:00:00-10:00", "2011-12-31T12:00:00+14:00"}},
		{"apia fixed on skipped date", "0 12 30 12 *", "Pacific/Apia", "2011-12-01T00:00:00-10:00", []string{"2012-12-30T12:00:00+14:00"}},
		{"apia wildcard", "0 */12 * * *", "Pacific/Apia", "2011-12-29T13:00:00-10:00", []string{"2011-12-31T00:00:00+14:00", "2011-12-31T12:00:00+14:00"}},

		// Past the tz tables (rules from the zone's TZ string), on the last day of a leap year.
		{"ny leap year end past tables", "0 12 31 12 *", ny, "2048-12-31T00:00:00-05:00", []string{"2048-12-31T12:00:00-05:00", "2049-12-31T12:00:00-05:00"}},
		{"ny wildcard leap year end", "*/30 * * * *", ny, "2048-12-31T23:10:00-05:00", []string{"2048-12-31T23:30:00-05:00", "2049-01-01T00:00:00-05:00"}},
		{"lord howe leap year end", "0 9 * * *", lhi, "2048-12-30T12:00:00+11:00", []string{"2048-12-31T09:00:00+11:00", "2049-01-01T09:00:00+11:00"}},
		{"ny dst past tables", "30 2 * * *", ny, "2048-03-07T12:00:00-05:00", []string{"2048-03-08T03:00:00-04:00", "2048-03-09T02:30:00-04:00"}},

		// Rule 6: the schedule's own zone, not the process's or the option's.
		{"prefix zone rules", "CRON_TZ=America/New_York 30 2 * * *", london, "2026-03-07T12:00:00-05:00", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"prefix zone repeated", "TZ=Europe/London 30 1 * * *", ny, "2026-10-24T12:00:00+01:00", []string{"2026-10-25T01:30:00+01:00", "2026-10-26T01:30:00Z"}},
	})
}

// TestNextBigBackwardJump: a backward change of 3 h or more is a clock
// correction, so the repeated times run again (rule 5).
func TestNextBigBackwardJump(t *testing.T) {
	t.Parallel()
	loc := loadLoc(t, "Antarctica/Vostok")
	// tzdata has Vostok go from +07 to UTC at 1994-02-01 00:00 local; check
	// the installed data agrees before relying on it.
	at := time.Date(1994, 1, 31, 17, 0, 0, 0, time.UTC)
	_, before := at.Add(-time.Second).In(loc).Zone()
	_, after := at.In(loc).Zone()
	if before != 7*3600 || after != 0 {
		t.Skipf("installed tzdata has no 7 h backward change for Vostok at %v (%d → %d)", at, before, after)
	}
	runNextCases(t, []nextCase{
		{"vostok fixed repeated after correction", "0 20 * * *", "Antarctica/Vostok", "1994-01-31T12:00:00+07:00", []string{"1994-01-31T20:00:00+07:00", "1994-01-31T20:00:00Z", "1994-02-01T20:00:00Z"}},
	})
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		want error
		msg  string // substring of the message
	}{
		{"", ErrInvalid, "empty"},
		{"   ", ErrInvalid, "empty"},
		{"0 0 30 2 *", ErrNeverFires, "February"},
		{"0 0 31 4,6,9,11 *", ErrNeverFires, "April, June, September, November"},
		{"0 0 31 2,4 *", ErrNeverFires, "never fires"},
		{"0 0 30,31 2 *", ErrNeverFires, "never fires"},
		{"0 0 30 2 */7", ErrNeverFires, "never fires"},
		{"CRON_TZ=America/New_York * 2 * 3 0#2", ErrNeverFires, "daylight-saving"},
		{"0 0 0 */31 2 1#5", ErrNeverFires, "never fires"},
		{"0 0 */31 * 1L", ErrNeverFires, "never fires"},
		{"* * * *", ErrInvalid, "4 fields"},
		{"* * * * * * *", ErrInvalid, "7 fields"},
		{"60 * * * *", ErrInvalid, "out of range"},
		{"* 24 * * *", ErrInvalid, "out of range"},
		{"* * 0 * *", ErrInvalid, "out of range"},
		{"* * 32 * *", ErrInvalid, "out of range"},
		{"* * * 13 *", ErrInvalid, "out of range"},
		{"* * * * 8", ErrInvalid, "out of range"},
		{"*/0 * * * *", ErrInvalid, "step"},
		{"5-1 * * * *", ErrInvalid, "backwards"},
		{"* * * foo *", ErrInvalid, "name"},
		{"* * * * 1#6", ErrInvalid, "week number"},
		{"* * * * 1#0", ErrInvalid, "week number"},
		{"* * L * L", ErrInvalid, "day-of-week"},
		{"1,,2 * * * *", ErrInvalid, "empty"},
		{"@reboot", ErrInvalid, "macro"},
		{"CRON_TZ=Mars/Base 0 0 * * *", ErrInvalid, "unknown time zone"},
		{"TZ=Europe/Paris", ErrInvalid, "nothing after"},
		{"every 0s", ErrInvalid, "positive"},
		{"every 5 fortnights", ErrInvalid, "unknown unit"},
		{"every 1.5h", ErrInvalid, "want a whole number followed by a unit"},
		{"in 30", ErrInvalid, "want a whole number followed by a unit"},
		{"every fortnight", ErrInvalid, "cannot read"},
		{"in 0m", ErrInvalid, "positive"},
		{"in soon", ErrInvalid, "duration"},
		{"2026-02-30 09:00", ErrInvalid, "not a real date"},
		{"2026-06-18T25:00:00Z", ErrInvalid, "RFC 3339"},
		{"2026-06-18T09:00:00+24:00", ErrInvalid, "RFC 3339"},
		{"2026-06-18 9am", ErrInvalid, "timestamp"},
		{"every monday at 25:00", ErrInvalid, "time of day"},
		{"every day at 13pm", ErrInvalid, "time of day"},
		{"sometimes", ErrInvalid, "cannot read"},
		{"every monday 9am and 5:30pm", ErrInvalid, "different minutes"},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tc.expr, Options{Anchor: mustTime(t, "2026-01-01T00:00:00Z")})
			if err == nil {
				t.Fatalf("Parse(%q) = %s, want error", tc.expr, s.Describe())
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Parse(%q) error %v, want %v", tc.expr, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Parse(%q) error %q does not mention %q", tc.expr, err, tc.msg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans several lines: %q", err)
			}
		})
	}
}

func TestScheduleAccessors(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-01-01T00:00:00Z")
	paris := loadLoc(t, "Europe/Paris")
	cases := []struct {
		expr     string
		kind     Kind
		zone     string
		period   time.Duration
		describe string
		wildcard bool
	}{
		{"*/5 * * * *", KindCron, "Europe/Paris", 5 * time.Minute, `cron "*/5 * * * *" in Europe/Paris (wildcard job)`, true},
		{"0 9 * * 1", KindCron, "Europe/Paris", 7 * 24 * time.Hour, `cron "0 9 * * 1" in Europe/Paris (fixed-time job)`, false},
		{"every monday 9am", KindCron, "Europe/Paris", 7 * 24 * time.Hour, `cron "0 9 * * 1" in Europe/Paris (from the phrase "every monday 9am"; fixed-time job)`, false},
		{"CRON_TZ=Asia/Tokyo @hourly", KindCron, "Asia/Tokyo", time.Hour, `cron "0 * * * *" in Asia/Tokyo (from the macro "@hourly"; wildcard job)`, true},
		{"*/10 * * * * *", KindCron, "Europe/Paris", 10 * time.Second, `cron "*/10 * * * * *" in Europe/Paris (wildcard job)`, true},
		{"every 90s", KindInterval, "Europe/Paris", 90 * time.Second, "interval every 1m30s, anchored at 2026-01-01T01:00:00+01:00 (first fire one interval after it)", false},
		{"in 30m", KindOnce, "Europe/Paris", 0, "once at 2026-01-01T01:30:00+01:00 in Europe/Paris", false},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tc.expr, Options{Location: paris, Anchor: anchor})
			if err != nil {
				t.Fatal(err)
			}
			if s.Kind() != tc.kind || s.Location().String() != tc.zone || s.Period() != tc.period || s.Expr() != tc.expr || s.Wildcard() != tc.wildcard {
				t.Errorf("kind %s zone %s period %s expr %q wildcard %v; want %s %s %s %q %v",
					s.Kind(), s.Location(), s.Period(), s.Expr(), s.Wildcard(), tc.kind, tc.zone, tc.period, tc.expr, tc.wildcard)
			}
			if got := s.Describe(); got != tc.describe {
				t.Errorf("Describe() = %s\n             want %s", got, tc.describe)
			}
		})
	}
}

func TestNextIntervalAnchor(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-01-01T00:00:00.25Z")
	s, err := Parse("every 10s", Options{Anchor: anchor})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ after, want string }{
		{"2025-12-01T00:00:00Z", "2026-01-01T00:00:10.25Z"}, // before the anchor: the first fire
		{"2026-01-01T00:00:00.25Z", "2026-01-01T00:00:10.25Z"},
		{"2026-01-01T00:00:10.25Z", "2026-01-01T00:00:20.25Z"}, // strictly after
		{"2026-01-01T00:00:10.2Z", "2026-01-01T00:00:10.25Z"},
		{"2026-01-01T00:00:10.3Z", "2026-01-01T00:00:20.25Z"},
		{"2027-01-01T00:00:00Z", "2027-01-01T00:00:00.25Z"}, // no drift over a year
	}
	for _, tc := range cases {
		got, ok := s.Next(mustTime(t, tc.after))
		if !ok || got.Format(time.RFC3339Nano) != tc.want {
			t.Errorf("Next(%s) = %s %v, want %s", tc.after, got.Format(time.RFC3339Nano), ok, tc.want)
		}
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"2026-06-18T09:00:00Z", "2026-06-18T09:00:00.5+02:00", "2026-06-18t09:00:00z"} {
		if _, err := ParseTime(ok); err != nil {
			t.Errorf("ParseTime(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "2026-06-18", "2026-06-18T9:00:00Z", "2026-06-18T09:00:00,5Z", "2026-06-18T09:00:00+24:00", "2026-06-18T09:00:00", "2026-13-18T09:00:00Z"} {
		if _, err := ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) accepted", bad)
		}
	}
}

func TestConcurrentNext(t *testing.T) {
	t.Parallel()
	s, err := Parse("CRON_TZ=America/New_York */7 1-3 * * *", Options{Anchor: mustTime(t, "2026-01-01T00:00:00Z")})
	if err != nil {
		t.Fatal(err)
	}
	start := mustTime(t, "2026-03-01T00:00:00Z")
	want, _ := s.Next(start)
	done := make(chan time.Time)
	for range 8 {
		go func() {
			got, _ := s.Next(start)
			done <- got
		}()
	}
	for range 8 {
		if got := <-done; !got.Equal(want) {
			t.Errorf("concurrent Next = %v, want %v", got, want)
		}
	}
}

// TestSubSecondDurations: intervals and relative one-shots count whole
// seconds; one written below a second says the smallest is 1s, and whole
// seconds written in smaller units are read as such.
func TestSubSecondDurations(t *testing.T) {
	t.Parallel()
	anchor := mustTime(t, "2026-01-01T00:00:00Z")
	cases := []struct {
		expr   string
		msg    string        // exact tail of the error; "" when it parses
		period time.Duration // the interval when it parses
	}{
		{"every 500ms", "interval 500ms is below the smallest of 1s", 0},
		{"@every 500ms", "interval 500ms is below the smallest of 1s", 0},
		{"every 999 milliseconds", "interval 999ms is below the smallest of 1s", 0},
		{"every 250µs", "interval 250µs is below the smallest of 1s", 0},
		{"every 10us", "interval 10µs is below the smallest of 1s", 0},
		{"every 1ns", "interval 1ns is below the smallest of 1s", 0},
		{"every 1s500ms", "interval 1.5s is not a whole number of seconds (the smallest unit is 1s)", 0},
		{"every 1500ms", "interval 1.5s is not a whole number of seconds (the smallest unit is 1s)", 0},
		{"in 500ms", "duration 500ms is below the smallest of 1s", 0},
		{"500ms", "duration 500ms is below the smallest of 1s", 0},
		{"every 5 fortnights", `interval "5 fortnights": unknown unit "fortnights" (want s, m, h, d or w; the smallest interval is 1s)`, 0},
		{"every 2000ms", "", 2 * time.Second},
		{"every 1m 500ms 500ms", "", 61 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tc.expr, Options{Anchor: anchor})
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("Parse(%q): %v", tc.expr, err)
				}
				if s.Kind() != KindInterval || s.Period() != tc.period {
					t.Fatalf("Parse(%q) = %s, period %s; want an interval of %s", tc.expr, s.Kind(), s.Period(), tc.period)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse(%q) = %s, want error", tc.expr, s.Describe())
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q) error %v is not ErrInvalid", tc.expr, err)
			}
			want := "schedule " + strconv.Quote(tc.expr) + ": " + ErrInvalid.Error() + ": " + tc.msg
			if err.Error() != want {
				t.Errorf("Parse(%q) error\n got %q\nwant %q", tc.expr, err, want)
			}
		})
	}
}
