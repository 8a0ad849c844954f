package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Time is an instant on the wire. Read, it is strict RFC 3339 (see
// ParseTime) and remembers the text it was read from; written, it is that
// text again, byte for byte, so an instant an agent sent comes back in the
// spelling the agent chose (`2026-12-01T09:00:00+02:00` stays so). A Time made
// in code (NewTime) is written in RFC 3339 in UTC with the shortest exact
// fraction (FormatTime). The zero Time is "absent"; JSON null is refused when
// reading.
//
// Compare instants with Equal, never with ==: the same instant spelled in two
// ways is two different Time values.
type Time struct {
	time.Time
	// text is the spelling t was read from when it differs from
	// FormatTime(t.Time); "" writes the canonical form.
	text string
}

// NewTime returns t as a wire Time, written in the canonical form.
func NewTime(t time.Time) Time { return Time{Time: t} }

// NewTimeSpelled returns the instant t as a wire Time written as spelling,
// when spelling is a strict RFC 3339 text (ParseTime) of exactly that
// instant; otherwise, and for an empty spelling, as NewTime(t). It restores
// a spelling kept apart from the instant (see Spelling).
func NewTimeSpelled(t time.Time, spelling string) Time {
	if spelling == "" || spelling == FormatTime(t) {
		return Time{Time: t}
	}
	if v, err := ParseTime(spelling); err != nil || !v.Equal(t) {
		return Time{Time: t}
	}
	return Time{Time: t, text: spelling}
}

// String formats t as RFC 3339 in UTC (the canonical form, for logs); Text
// is how it is written on the wire.
func (t Time) String() string { return FormatTime(t.Time) }

// Text returns t as it is written on the wire: the text it was read from, or
// the canonical form.
func (t Time) Text() string {
	if t.text != "" {
		return t.text
	}
	return FormatTime(t.Time)
}

// Spelling returns the text t was read from when that differs from the
// canonical form, else "": what must be stored beside the instant to write t
// back as it came (see NewTimeSpelled).
func (t Time) Spelling() string { return t.text }

// MarshalJSON implements json.Marshaler: the text t was read from, or the
// canonical form.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	// Both forms hold only digits, letters T t Z z and - + : . - nothing
	// JSON escapes.
	return []byte(`"` + t.Text() + `"`), nil
}

// UnmarshalJSON implements json.Unmarshaler with ParseTime's strict rules,
// keeping the text. null and non-strings are refused.
func (t *Time) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return errors.New("time must not be null")
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("time must be an RFC 3339 string")
	}
	v, err := ParseTime(s)
	if err != nil {
		return err
	}
	t.Time, t.text = v, ""
	if s != FormatTime(v) {
		t.text = s
	}
	return nil
}

// FormatTime writes t as RFC 3339 in UTC, with a fraction only when needed.
func FormatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// ParseTime parses an instant strictly: RFC 3339 `YYYY-MM-DDTHH:MM:SS[.f{1,9}](Z|±hh:mm)`
// with a 4-digit year, a `T` or `t` separator (also a space is refused), a `Z`
// or an offset of at most ±14:00, at most 9 fraction digits after a dot, and
// no leap second. It refuses what Go's time.Parse lets through: one-digit
// hours (`T1:00:00Z`), a comma fraction (`,5`), `+24:00`. The instant must
// lie between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999999999Z, so
// that FormatTime writes it back in the same strict form and it is never the
// zero Time, which this package treats as absent.
func ParseTime(s string) (time.Time, error) {
	bad := func(why string) (time.Time, error) {
		return time.Time{}, fmt.Errorf("invalid time %q: %s (want RFC 3339 like 2026-06-18T09:00:00Z)", truncate(s, 64), why)
	}
	// Fixed part: 2006-01-02T15:04:05 = 19 bytes.
	if len(s) < 20 {
		return bad("too short")
	}
	if why := checkDateTimeLayout(s[:19]); why != "" {
		return bad(why)
	}
	year, month, day := atoi(s[0:4]), atoi(s[5:7]), atoi(s[8:10])
	hour, minute, sec := atoi(s[11:13]), atoi(s[14:16]), atoi(s[17:19])
	switch {
	case month < 1 || month > 12:
		return bad("month out of range")
	case day < 1 || day > DaysIn(year, time.Month(month)):
		return bad("day out of range")
	case hour > 23 || minute > 59:
		return bad("hour or minute out of range")
	case sec > 59:
		return bad("second out of range (leap seconds are not accepted)")
	}
	nsec, rest, why := parseFraction(s[19:])
	if why != "" {
		return bad(why)
	}
	loc, why := parseOffset(rest)
	if why != "" {
		return bad(why)
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc)
	if u := t.UTC(); u.Year() < 1970 || u.Year() > 9999 {
		return bad("instant out of range (1970-01-01T00:00:00Z to 9999-12-31T23:59:59Z)")
	}
	return t, nil
}

// checkDateTimeLayout checks the fixed part YYYY-MM-DDTHH:MM:SS of a time,
// character by character; it returns what is wrong, or "".
func checkDateTimeLayout(s string) string {
	for i, c := range []byte(s) {
		switch i {
		case 4, 7:
			if c != '-' {
				return "date must be YYYY-MM-DD"
			}
		case 10:
			if c != 'T' && c != 't' {
				return "date and time must be separated by T"
			}
		case 13, 16:
			if c != ':' {
				return "time must be HH:MM:SS"
			}
		default:
			if c < '0' || c > '9' {
				return "unexpected character"
			}
		}
	}
	return ""
}

// parseFraction reads an optional fraction of a second (a dot and 1 to 9
// digits) at the start of rest: it returns the nanoseconds, what follows it,
// and what is wrong, or "".
func parseFraction(rest string) (nsec int, after, why string) {
	if rest[0] != '.' {
		return 0, rest, ""
	}
	n := 1
	for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
		n++
	}
	digits := rest[1:n]
	if len(digits) == 0 {
		return 0, "", "empty fraction"
	}
	if len(digits) > 9 {
		return 0, "", "more than 9 fraction digits"
	}
	nsec = atoi(digits)
	for i := len(digits); i < 9; i++ {
		nsec *= 10
	}
	return nsec, rest[n:], ""
}

// parseOffset reads the zone of a time, all of rest: Z or ±hh:mm of at most
// 14 hours. It returns the zone, and what is wrong, or "".
func parseOffset(rest string) (*time.Location, string) {
	switch {
	case rest == "Z" || rest == "z":
		return time.UTC, ""
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':' &&
		isDigits(rest[1:3]) && isDigits(rest[4:6]):
		oh, om := atoi(rest[1:3]), atoi(rest[4:6])
		if om > 59 || oh*60+om > 14*60 {
			return nil, "offset out of range (at most ±14:00)"
		}
		off := (oh*60 + om) * 60
		if rest[0] == '-' {
			off = -off
		}
		return time.FixedZone("", off), ""
	}
	return nil, "offset must be Z or ±hh:mm"
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return len(s) > 0
}

func atoi(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
