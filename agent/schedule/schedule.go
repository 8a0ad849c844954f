package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors returned by Parse, for errors.Is. Every error from Parse wraps
// exactly one of them.
var (
	// ErrInvalid means the expression could not be read.
	ErrInvalid = errors.New("invalid")
	// ErrNeverFires means the expression is well formed but no time ever matches it.
	ErrNeverFires = errors.New("never fires")
)

// Options tell Parse how to read an expression.
type Options struct {
	Location *time.Location // zone for cron and local timestamps when the expression has no CRON_TZ=/TZ= prefix; nil = UTC
	Anchor   time.Time      // creation instant: intervals are anchored here, relative one-shots ("in 30m") count from here; zero = the time Parse is called
}

// Kind is the family a schedule belongs to.
type Kind string

// The kinds of schedule.
const (
	KindCron     Kind = "cron"     // cron lines, macros and natural phrases
	KindInterval Kind = "interval" // "every 15m": anchor + k·d, k ≥ 1
	KindOnce     Kind = "once"     // one instant: relative ("in 30m") or a timestamp
)

// Schedule is a parsed, immutable schedule, safe for concurrent use.
type Schedule struct {
	expr   string
	kind   Kind
	loc    *time.Location
	source string // how the expression was written when it was not a plain cron line ("phrase", "macro")
	line   string // the cron line understood (cron kind)

	cron   *cronSpec
	every  int64     // interval in seconds
	anchor time.Time // interval anchor
	at     time.Time // one-shot instant
	period time.Duration
}

// maxYear bounds the instants Next reasons about.
const maxYear = 100000

// Parse reads a schedule expression. Accepted forms:
//
//   - cron lines of 5 fields (minute hour day-of-month month day-of-week) or 6
//     (a leading seconds field), with *, a-b, a,b, */n, a-b/n, a/n, names,
//     L in day-of-month, DOW#n and DOWL in day-of-week, and the macros
//     @yearly @annually @monthly @weekly @daily @midnight @hourly;
//   - intervals "every 90s", "every 15m", "every 2h", "every 1d", "every 1h30m",
//     "@every 5m", anchored at Options.Anchor: fires at anchor + k·d for k ≥ 1
//     (the anchor itself is not a fire); intervals and relative one-shots
//     count whole seconds, so the smallest interval is 1s ("every 500ms" is
//     ErrInvalid saying so, "every 2000ms" is every 2s);
//   - one-shots "in 30m", "30m", "+90s", "2h30m" counted from Options.Anchor,
//     an RFC 3339 timestamp, or "2026-06-18 09:00[:05]" read in the schedule's zone;
//   - phrases such as "every monday 9am", "weekdays at 9am", "daily at 7am",
//     "monday, wednesday at 9:30pm", "noon", "midnight", which become cron lines.
//
// Any of them may start with "CRON_TZ=Zone " or "TZ=Zone ", which wins over
// Options.Location. An expression that can never fire is an error wrapping
// ErrNeverFires; anything unreadable wraps ErrInvalid.
func Parse(expr string, opts Options) (*Schedule, error) {
	s, err := parse(expr, opts)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", expr, err)
	}
	return s, nil
}

func parse(expr string, opts Options) (*Schedule, error) {
	if len(expr) > 1024 {
		return nil, fmt.Errorf("%w: longer than 1024 bytes", ErrInvalid)
	}
	body := strings.TrimSpace(expr)
	if body == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalid)
	}
	loc := opts.Location
	if loc == nil {
		loc = time.UTC
	}
	if zone, rest, ok := cutZonePrefix(body); ok {
		if zone == "" || zone == "Local" {
			return nil, fmt.Errorf("%w: name a time zone after CRON_TZ=/TZ=", ErrInvalid)
		}
		l, err := time.LoadLocation(zone)
		if err != nil {
			return nil, fmt.Errorf("%w: unknown time zone %q", ErrInvalid, zone)
		}
		loc, body = l, rest
		if body == "" {
			return nil, fmt.Errorf("%w: nothing after the time zone", ErrInvalid)
		}
	}
	anchor := opts.Anchor
	if anchor.IsZero() {
		anchor = time.Now()
	}
	if anchor.Year() < 1 || anchor.Year() > maxYear {
		return nil, fmt.Errorf("%w: anchor %v out of range", ErrInvalid, anchor)
	}
	s := &Schedule{expr: expr, loc: loc}
	if err := s.read(body, anchor); err != nil {
		return nil, err
	}
	if s.kind == KindCron {
		if why := s.cron.never(); why != "" {
			return nil, fmt.Errorf("%w: %s", ErrNeverFires, why)
		}
		// A wildcard job whose every match falls in a DST gap never fires in this zone.
		first, ok := s.Next(anchor)
		if !ok {
			return nil, fmt.Errorf("%w: every matching time is skipped by daylight-saving changes in %s", ErrNeverFires, loc)
		}
		s.period = cronPeriod(s, first)
	}
	return s, nil
}

// cutZonePrefix splits "CRON_TZ=Zone rest" or "TZ=Zone rest".
func cutZonePrefix(body string) (zone, rest string, ok bool) {
	var after string
	switch {
	case len(body) >= 8 && strings.EqualFold(body[:8], "CRON_TZ="):
		after = body[8:]
	case len(body) >= 3 && strings.EqualFold(body[:3], "TZ="):
		after = body[3:]
	default:
		return "", "", false
	}
	zone, rest, _ = strings.Cut(after, " ")
	if i := strings.IndexAny(zone, "\t\n"); i >= 0 {
		zone, rest = zone[:i], zone[i+1:]+" "+rest
	}
	return zone, strings.TrimSpace(rest), true
}

// read classifies body and fills s.
func (s *Schedule) read(body string, anchor time.Time) error {
	lower := strings.ToLower(body)
	// Macros and @every.
	if strings.HasPrefix(lower, "@") {
		if rest, ok := strings.CutPrefix(lower, "@every "); ok {
			return s.readInterval(strings.TrimSpace(rest), anchor)
		}
		line, ok := macros[lower]
		if !ok {
			return fmt.Errorf("%w: unknown macro %q (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every D)", ErrInvalid, body)
		}
		return s.readCron(line, "macro")
	}
	fields := strings.Fields(body)
	// Cron lines start with a number or '*'.
	if c := body[0]; c == '*' || (c >= '0' && c <= '9') {
		if len(fields) >= 3 || strings.ContainsAny(body, "*,/") {
			return s.readCron(body, "")
		}
	}
	// Intervals.
	if rest, ok := strings.CutPrefix(lower, "every "); ok {
		rest = strings.TrimSpace(rest)
		if rest != "" && rest[0] >= '0' && rest[0] <= '9' {
			return s.readInterval(rest, anchor)
		}
	}
	// One-shots.
	if at, ok, err := parseTimestamp(body, s.loc); ok {
		if err != nil {
			return err
		}
		s.kind, s.at = KindOnce, at
		return nil
	}
	if rel, ok := relativeText(lower); ok {
		d, err := parseDuration(rel, "duration")
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		at := anchor.Add(time.Duration(d) * time.Second)
		if at.Year() > maxYear {
			return fmt.Errorf("%w: %q is too far away", ErrInvalid, body)
		}
		s.kind, s.at = KindOnce, at
		return nil
	}
	// Natural phrases.
	line, err := parsePhrase(lower)
	if err != nil {
		return err
	}
	return s.readCron(line, "phrase")
}

func (s *Schedule) readInterval(text string, anchor time.Time) error {
	d, err := parseDuration(text, "interval")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return s.setInterval(d, anchor)
}

func (s *Schedule) setInterval(d int64, anchor time.Time) error {
	s.kind, s.every, s.anchor = KindInterval, d, anchor
	s.period = time.Duration(d) * time.Second
	return nil
}

func (s *Schedule) readCron(line, source string) error {
	c, err := parseCron(line)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	s.kind, s.cron, s.line, s.source = KindCron, c, strings.Join(strings.Fields(line), " "), source
	return nil
}

// cronPeriod is the smallest gap between the next few fires after first.
func cronPeriod(s *Schedule, first time.Time) time.Duration {
	var best time.Duration
	prev := first
	for range 6 {
		next, ok := s.Next(prev)
		if !ok {
			break
		}
		if gap := next.Sub(prev); best == 0 || gap < best {
			best = gap
		}
		prev = next
	}
	return best
}

// Next returns the first fire strictly after `after`, in the schedule's zone;
// false means the schedule never fires again. It is a pure function of its
// input and the schedule. Fires are whole seconds, except for intervals and
// relative one-shots, which keep the anchor's fraction.
func (s *Schedule) Next(after time.Time) (time.Time, bool) {
	if after.Year() > maxYear {
		return time.Time{}, false
	}
	switch s.kind {
	case KindOnce:
		if after.Before(s.at) {
			return s.at.In(s.loc), true
		}
		return time.Time{}, false
	case KindInterval:
		return s.nextInterval(after)
	}
	from := after.Unix() + 1 // the first whole second strictly after `after`
	if after.Year() < -maxYear {
		from = time.Date(-maxYear, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	}
	y := after.Year()
	if y < 2040 {
		y = 2040 // tz tables end by then; past it the rules repeat with the calendar
	}
	t, ok := nextInZone(s.loc, from, s.cron.dstRule(), s.cron, int64(y)+401)
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(t, 0).In(s.loc), true
}

func (s *Schedule) nextInterval(after time.Time) (time.Time, bool) {
	ds := after.Unix() - s.anchor.Unix()
	if after.Nanosecond() < s.anchor.Nanosecond() {
		ds-- // floor of the difference in seconds
	}
	k := floorDiv(ds, s.every) + 1
	if k < 1 {
		k = 1
	}
	at := time.Unix(s.anchor.Unix()+k*s.every, int64(s.anchor.Nanosecond()))
	if at.Year() > maxYear {
		return time.Time{}, false
	}
	return at.In(s.loc), true
}

// Kind reports the schedule's family.
func (s *Schedule) Kind() Kind { return s.kind }

// Expr returns the expression exactly as it was given to Parse.
func (s *Schedule) Expr() string { return s.expr }

// Location returns the effective zone: the CRON_TZ=/TZ= prefix, else
// Options.Location, else UTC.
func (s *Schedule) Location() *time.Location { return s.loc }

// CronLine returns the cron line a cron-kind schedule was understood as
// (macros and phrases expanded), or "" for other kinds.
func (s *Schedule) CronLine() string { return s.line }

// Wildcard reports whether a cron schedule is a wildcard job (its minute or
// hour field starts with '*'), which follows the wall clock across DST changes.
func (s *Schedule) Wildcard() bool { return s.kind == KindCron && s.cron.wildcard }

// Period returns the typical gap between fires: exact for intervals, the
// smallest gap among the first few fires after the anchor for cron, 0 for
// one-shots.
func (s *Schedule) Period() time.Duration { return s.period }

// Describe says in one line how the expression was understood.
func (s *Schedule) Describe() string {
	switch s.kind {
	case KindOnce:
		return fmt.Sprintf("once at %s in %s", s.at.In(s.loc).Format(time.RFC3339Nano), s.loc)
	case KindInterval:
		return fmt.Sprintf("interval every %s, anchored at %s (first fire one interval after it)",
			time.Duration(s.every)*time.Second, s.anchor.In(s.loc).Format(time.RFC3339Nano))
	}
	job := "fixed-time job"
	if s.cron.wildcard {
		job = "wildcard job"
	}
	d := fmt.Sprintf("cron %q in %s", s.line, s.loc)
	switch s.source {
	case "phrase":
		d += fmt.Sprintf(" (from the phrase %q; %s)", strings.TrimSpace(stripZone(s.expr)), job)
	case "macro":
		d += fmt.Sprintf(" (from the macro %q; %s)", strings.TrimSpace(stripZone(s.expr)), job)
	default:
		d += " (" + job + ")"
	}
	return d
}

// stripZone drops a CRON_TZ=/TZ= prefix.
func stripZone(expr string) string {
	if _, rest, ok := cutZonePrefix(strings.TrimSpace(expr)); ok {
		return rest
	}
	return expr
}
