package schedule_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/schedule"
)

// A fixed-time job whose local time is skipped on the spring-forward night
// fires once, right after the gap.
func ExampleSchedule_Next_springForward() {
	s, err := schedule.Parse("CRON_TZ=America/New_York 30 2 * * *", schedule.Options{})
	if err != nil {
		panic(err)
	}
	t := time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)
	for range 3 {
		t, _ = s.Next(t)
		fmt.Println(t.Format(time.RFC3339))
	}
	// Output:
	// 2026-03-08T03:00:00-04:00
	// 2026-03-09T02:30:00-04:00
	// 2026-03-10T02:30:00-04:00
}

// On the fall-back night a fixed-time job runs in the first pass only, while
// a wildcard job (minute or hour starting with '*') runs in both.
func ExampleSchedule_Next_fallBack() {
	anchor := time.Date(2026, 10, 31, 0, 0, 0, 0, time.UTC)
	opts := schedule.Options{Location: mustZone("Europe/London"), Anchor: anchor}
	for _, expr := range []string{"30 1 * * *", "30 * * * *"} {
		s, _ := schedule.Parse(expr, opts)
		t := time.Date(2026, 10, 24, 23, 45, 0, 0, time.UTC) // 00:45 BST
		fmt.Print(expr, ":")
		for range 3 {
			t, _ = s.Next(t)
			fmt.Print(" ", t.Format("15:04Z07:00"))
		}
		fmt.Println()
	}
	// Output:
	// 30 1 * * *: 01:30+01:00 01:30Z 01:30Z
	// 30 * * * *: 01:30+01:00 01:30Z 02:30Z
}

// Phrases become cron lines, and Describe says how they were read.
func ExampleSchedule_Describe() {
	s, _ := schedule.Parse("weekdays at 9:30am", schedule.Options{Location: mustZone("Europe/Paris")})
	fmt.Println(s.Describe())
	// Output:
	// cron "30 9 * * 1-5" in Europe/Paris (from the phrase "weekdays at 9:30am"; fixed-time job)
}

// Intervals are anchored at creation: anchor + k·d, with no drift.
func ExampleParse_interval() {
	anchor := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s, _ := schedule.Parse("every 90m", schedule.Options{Anchor: anchor})
	next, _ := s.Next(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	fmt.Println(s.Kind(), next.Format(time.RFC3339), s.Period())
	// Output:
	// interval 2026-01-01T13:00:00Z 1h30m0s
}

// A line that can never fire is refused when it is parsed.
func ExampleParse_neverFires() {
	_, err := schedule.Parse("0 0 31 4,6,9,11 *", schedule.Options{})
	fmt.Println(errors.Is(err, schedule.ErrNeverFires))
	fmt.Println(err)
	// Output:
	// true
	// schedule "0 0 31 4,6,9,11 *": never fires: no day in the day-of-month field occurs in April, June, September, November
}

func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}
