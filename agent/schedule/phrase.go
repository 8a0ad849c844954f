package schedule

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// maxDurationSeconds bounds intervals and relative one-shots (about 100 years).
const maxDurationSeconds = 100 * 366 * secondsPerDay

var durationUnits = map[string]int64{
	"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
	"m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
	"h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
	"d": secondsPerDay, "day": secondsPerDay, "days": secondsPerDay,
	"w": 7 * secondsPerDay, "wk": 7 * secondsPerDay, "week": 7 * secondsPerDay, "weeks": 7 * secondsPerDay,
}

// subSecondUnits are units below a second, in nanoseconds. Schedules count
// whole seconds; these are read only to say so plainly.
var subSecondUnits = map[string]int64{
	"ms": 1e6, "msec": 1e6, "msecs": 1e6, "millisecond": 1e6, "milliseconds": 1e6,
	"us": 1e3, "usec": 1e3, "usecs": 1e3, "microsecond": 1e3, "microseconds": 1e3,
	"ns": 1, "nsec": 1, "nsecs": 1, "nanosecond": 1, "nanoseconds": 1,
}

// errBelowSecond marks a duration that is not a whole, positive number of
// seconds because it is written in units below a second.
var errBelowSecond = errors.New("below the smallest of 1s")

// parseDuration reads "90s", "1h30m", "1d", "2 hours", "1 hour 30 minutes"
// into whole seconds (> 0). what names the value in errors ("interval",
// "duration"). Units below a second ("500ms", "2000ms") are read so that a
// sub-second value gets a clear error, and whole seconds written in them
// are accepted.
func parseDuration(text, what string) (int64, error) {
	in := strings.TrimSpace(strings.ToLower(text))
	in = strings.NewReplacer("µ", "u", "μ", "u").Replace(in)
	if in == "" {
		return 0, fmt.Errorf("missing %s", what)
	}
	var total, subNanos int64
	i := 0
	for i < len(in) {
		for i < len(in) && in[i] == ' ' {
			i++
		}
		if i == len(in) {
			break
		}
		j := i
		for j < len(in) && in[j] >= '0' && in[j] <= '9' {
			j++
		}
		if j == i || j-i > 9 {
			return 0, fmt.Errorf("duration %q: want a whole number before each unit", text)
		}
		n, _ := strconv.ParseInt(in[i:j], 10, 64)
		for j < len(in) && in[j] == ' ' {
			j++
		}
		k := j
		for k < len(in) && in[k] >= 'a' && in[k] <= 'z' {
			k++
		}
		if ns, sub := subSecondUnits[in[j:k]]; sub {
			subNanos += n * ns
			i = k
			continue
		}
		unit, ok := durationUnits[in[j:k]]
		if !ok && j == k {
			return 0, fmt.Errorf("duration %q: want a whole number followed by a unit (s, m, h, d or w)", text)
		}
		if !ok {
			return 0, fmt.Errorf("%s %q: unknown unit %q (want s, m, h, d or w; the smallest %s is 1s)", what, text, in[j:k], what)
		}
		total += n * unit
		if total > maxDurationSeconds {
			return 0, fmt.Errorf("duration %q is longer than 100 years", text)
		}
		i = k
	}
	if subNanos > 0 {
		whole := time.Duration(total)*time.Second + time.Duration(subNanos)
		switch {
		case whole < time.Second:
			return 0, fmt.Errorf("%s %s is %w", what, whole, errBelowSecond)
		case subNanos%int64(time.Second) != 0:
			return 0, fmt.Errorf("%s %s is not a whole number of seconds (the smallest unit is 1s)", what, whole)
		}
		total += subNanos / int64(time.Second)
		if total > maxDurationSeconds {
			return 0, fmt.Errorf("duration %q is longer than 100 years", text)
		}
	}
	if total <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", text)
	}
	return total, nil
}

// relativeText recognises "in 30m", "+90s" and a bare "2h30m", returning the
// duration text.
func relativeText(lower string) (string, bool) {
	if rest, ok := strings.CutPrefix(lower, "in "); ok {
		return strings.TrimSpace(rest), true
	}
	if rest, ok := strings.CutPrefix(lower, "+"); ok {
		return strings.TrimSpace(rest), true
	}
	if _, err := parseDuration(lower, "duration"); err == nil || errors.Is(err, errBelowSecond) {
		return lower, true
	}
	return "", false
}

var (
	rfc3339Re = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$`)
	localRe   = regexp.MustCompile(`^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2}))?)?$`)
	dateLike  = regexp.MustCompile(`^\d{4}-\d`)
)

// parseTimestamp reads an RFC 3339 timestamp or a local "2026-06-18 09:00"
// (read in loc, a skipped reading giving the end of the gap and a repeated
// one its first pass). matched is false when text does not look like a date.
func parseTimestamp(text string, loc *time.Location) (at time.Time, matched bool, err error) {
	if !dateLike.MatchString(text) {
		return time.Time{}, false, nil
	}
	if rfc3339Re.MatchString(text) {
		norm := strings.ToUpper(text[:10]) + "T" + strings.ToUpper(text[11:])
		t, perr := time.Parse(time.RFC3339Nano, norm)
		if perr != nil || !validOffset(text) {
			return time.Time{}, true, fmt.Errorf("%w: timestamp %q is not a valid RFC 3339 time", ErrInvalid, text)
		}
		return t, true, nil
	}
	m := localRe.FindStringSubmatch(text)
	if m == nil {
		return time.Time{}, true, fmt.Errorf("%w: timestamp %q: want RFC 3339 or \"YYYY-MM-DD HH:MM[:SS]\"", ErrInvalid, text)
	}
	num := func(s string) int {
		n, _ := strconv.Atoi(s)
		return n
	}
	y, mo, d := num(m[1]), num(m[2]), num(m[3])
	h, mi, sec := num(m[4]), num(m[5]), num(m[6])
	if mo < 1 || mo > 12 || d < 1 || d > contract.DaysIn(y, time.Month(mo)) || h > 23 || mi > 59 || sec > 59 || y < 1 {
		return time.Time{}, true, fmt.Errorf("%w: timestamp %q is not a real date and time", ErrInvalid, text)
	}
	ws := civil{year: int64(y), month: mo, day: d, hour: h, minute: mi, second: sec}.wallSeconds()
	u, ok := resolveLocal(loc, ws)
	if !ok {
		return time.Time{}, true, fmt.Errorf("%w: timestamp %q does not exist in %s", ErrInvalid, text, loc)
	}
	return time.Unix(u, 0), true, nil
}

// validOffset checks the numeric offset of an RFC 3339 text is below 24 h.
func validOffset(text string) bool {
	last := text[len(text)-1]
	if last == 'Z' || last == 'z' {
		return true
	}
	off := text[len(text)-6:]
	h, _ := strconv.Atoi(off[1:3])
	m, _ := strconv.Atoi(off[4:6])
	return h < 24 && m < 60
}

var dayWords = map[string][]int{
	"day": {0, 1, 2, 3, 4, 5, 6}, "days": {0, 1, 2, 3, 4, 5, 6}, "daily": {0, 1, 2, 3, 4, 5, 6}, "everyday": {0, 1, 2, 3, 4, 5, 6},
	"weekday": {1, 2, 3, 4, 5}, "weekdays": {1, 2, 3, 4, 5},
	"weekend": {0, 6}, "weekends": {0, 6},
	"sunday": {0}, "sun": {0}, "sundays": {0},
	"monday": {1}, "mon": {1}, "mondays": {1},
	"tuesday": {2}, "tue": {2}, "tues": {2}, "tuesdays": {2},
	"wednesday": {3}, "wed": {3}, "wednesdays": {3},
	"thursday": {4}, "thu": {4}, "thur": {4}, "thurs": {4}, "thursdays": {4},
	"friday": {5}, "fri": {5}, "fridays": {5},
	"saturday": {6}, "sat": {6}, "saturdays": {6},
}

var clockRe = regexp.MustCompile(`^(\d{1,2})(?::(\d{2}))?(am|pm|a\.m\.|p\.m\.)?$`)

// fixedPhrases are the phrases that each stand for one cron line.
var fixedPhrases = map[string]string{
	"every minute": "* * * * *",
	"hourly":       "0 * * * *",
	"every hour":   "0 * * * *",
	"weekly":       "0 0 * * 0",
	"every week":   "0 0 * * 0",
	"monthly":      "0 0 1 * *",
	"every month":  "0 0 1 * *",
	"yearly":       "0 0 1 1 *",
	"annually":     "0 0 1 1 *",
	"every year":   "0 0 1 1 *",
}

// parsePhrase turns phrases people type into a cron line: "every monday 9am",
// "weekdays at 9am", "daily at 7am", "monday, wednesday at 9:30pm", "noon".
func parsePhrase(lower string) (string, error) {
	if line, ok := fixedPhrases[strings.Join(strings.Fields(lower), " ")]; ok {
		return line, nil
	}
	toks := strings.Fields(strings.NewReplacer(",", " ", "&", " and ").Replace(lower))
	p := phrase{minute: -1}
	for i := 0; i < len(toks); i++ {
		used, err := p.word(toks[i], toks[i+1:])
		if err != nil {
			return "", err
		}
		i += used
	}
	if !p.anyDay && p.minute < 0 {
		return "", unknownPhrase(lower)
	}
	return p.cron(), nil
}

// unknownPhrase is the error for a word (or a whole phrase) parsePhrase
// cannot read.
func unknownPhrase(w string) error {
	return fmt.Errorf("%w: cannot read %q (want a cron line, \"every 15m\", \"in 30m\", a timestamp, or a phrase like \"every monday 9am\" or \"weekdays at 9:30pm\")", ErrInvalid, w)
}

// phrase collects what the words of a phrase say.
type phrase struct {
	days    [7]bool
	anyDay  bool
	hours   []int
	minute  int  // -1 until a time of day is read
	afterAt bool // an "at" was read: a bare number is an hour
}

// word reads word w, followed by rest; it returns how many words of rest it
// used too (an "am" or "pm" written apart).
func (p *phrase) word(w string, rest []string) (int, error) {
	switch w {
	case "every", "each", "on", "and", "the":
		return 0, nil
	case "at", "@":
		p.afterAt = true
		return 0, nil
	case "noon", "midday":
		return 0, addTime(&p.hours, &p.minute, 12, 0)
	case "midnight":
		return 0, addTime(&p.hours, &p.minute, 0, 0)
	}
	if ds, ok := dayWords[w]; ok {
		for _, d := range ds {
			p.days[d] = true
		}
		p.anyDay = true
		return 0, nil
	}
	h, mi, used, err := p.readClock(w, rest)
	if err != nil {
		return 0, err
	}
	return used, addTime(&p.hours, &p.minute, h, mi)
}

// readClock reads a time of day ("9am", "9:30", "9 pm", "21" after "at")
// from w and, for an "am" or "pm" written apart, the first word of rest; it
// returns the hour, the minute and how many words of rest it used.
func (p *phrase) readClock(w string, rest []string) (h, mi, used int, err error) {
	m := clockRe.FindStringSubmatch(w)
	if m == nil {
		return 0, 0, 0, unknownPhrase(w)
	}
	mer := m[3]
	if mer == "" && len(rest) > 0 {
		switch rest[0] {
		case "am", "pm", "a.m.", "p.m.":
			mer, used = rest[0], 1
		}
	}
	if mer == "" && m[2] == "" && !p.afterAt {
		return 0, 0, 0, unknownPhrase(w)
	}
	h, _ = strconv.Atoi(m[1])
	if m[2] != "" {
		mi, _ = strconv.Atoi(m[2])
	}
	if mi > 59 || mer != "" && (h < 1 || h > 12) || mer == "" && h > 23 {
		return 0, 0, 0, fmt.Errorf("%w: %q is not a time of day", ErrInvalid, w)
	}
	if mer != "" {
		h %= 12
		if mer[0] == 'p' {
			h += 12
		}
	}
	return h, mi, used, nil
}

// cron is the cron line of what was read: midnight when no time was given,
// every day when no day was.
func (p *phrase) cron() string {
	hours, minute := p.hours, p.minute
	if minute < 0 {
		hours, minute = []int{0}, 0
	}
	dow := "*"
	if p.anyDay {
		var set []int
		for d, on := range p.days {
			if on {
				set = append(set, d)
			}
		}
		if len(set) < 7 {
			dow = compactList(set)
		}
	}
	return fmt.Sprintf("%d %s * * %s", minute, compactList(hours), dow)
}

// addTime records one time of day; several times must share the minute.
func addTime(hours *[]int, minute *int, h, m int) error {
	if *minute >= 0 && *minute != m {
		return fmt.Errorf("%w: times with different minutes need separate schedules", ErrInvalid)
	}
	*minute = m
	for _, x := range *hours {
		if x == h {
			return nil
		}
	}
	*hours = append(*hours, h)
	return nil
}

// compactList writes a set of small numbers as a cron list with ranges.
func compactList(set []int) string {
	s := append([]int(nil), set...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		switch {
		case j-i >= 2:
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		case j > i:
			parts = append(parts, strconv.Itoa(s[i]), strconv.Itoa(s[j]))
		default:
			parts = append(parts, strconv.Itoa(s[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// ParseTime reads a strict RFC 3339 timestamp with an offset ("Z" or ±hh:mm),
// refusing the loose forms time.Parse lets through (one-digit hours, a comma
// fraction, a +24:00 offset).
func ParseTime(text string) (time.Time, error) {
	if !rfc3339Re.MatchString(text) {
		return time.Time{}, fmt.Errorf("%w: %q is not an RFC 3339 time such as 2026-06-18T09:00:00Z", ErrInvalid, text)
	}
	t, matched, err := parseTimestamp(text, time.UTC)
	if !matched || err != nil {
		return time.Time{}, fmt.Errorf("%w: %q is not a valid RFC 3339 time", ErrInvalid, text)
	}
	return t, nil
}
