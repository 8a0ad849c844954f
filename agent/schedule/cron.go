package schedule

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// cronSpec is a parsed cron line: one bit set per field plus the day-of-month
// and day-of-week extras (L, #n, nL).
type cronSpec struct {
	seconds uint64 // bits 0–59
	minutes uint64 // bits 0–59
	hours   uint32 // bits 0–23
	dom     uint32 // bits 1–31
	months  uint16 // bits 1–12
	dow     uint8  // bits 0–6 (7 folded into 0)

	domLast bool      // L in day-of-month: the last day of the month
	dowNth  [7]uint8  // DOW#n: bit n (1–5) set for weekday DOW
	dowLast uint8     // DOWL: bit set for weekday DOW
	byFirst [7]uint32 // day bits from dow and dowNth for a month starting on weekday i

	domStar, dowStar bool // the field starts with '*': both day fields must match
	wildcard         bool // minute or hour starts with '*': follows the wall clock
	hasSeconds       bool // six fields were written
}

// Field bounds.
const (
	fieldSecond = iota
	fieldMinute
	fieldHour
	fieldDOM
	fieldMonth
	fieldDOW
)

var fieldNames = [...]string{"second", "minute", "hour", "day-of-month", "month", "day-of-week"}

var fieldBounds = [...][2]int{{0, 59}, {0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 7}}

var monthNames = map[string]int{
	"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
	"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12,
}

var dowNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

var monthLong = [...]string{"", "January", "February", "March", "April", "May", "June",
	"July", "August", "September", "October", "November", "December"}

// macros maps the @-forms to the cron lines they stand for.
var macros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// parseCron parses a five- or six-field cron line.
func parseCron(line string) (*cronSpec, error) {
	fields := strings.Fields(line)
	if len(fields) != 5 && len(fields) != 6 {
		return nil, fmt.Errorf("cron line has %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (with a leading seconds field)", len(fields))
	}
	c := &cronSpec{}
	if len(fields) == 5 {
		fields = append([]string{"0"}, fields...)
	} else {
		c.hasSeconds = true
	}
	for i, f := range fields {
		if err := c.parseField(i, f); err != nil {
			return nil, fmt.Errorf("%s field %q: %w", fieldNames[i], f, err)
		}
	}
	c.domStar = fields[fieldDOM][0] == '*'
	c.dowStar = fields[fieldDOW][0] == '*'
	c.wildcard = fields[fieldMinute][0] == '*' || fields[fieldHour][0] == '*'
	for first := range 7 {
		var m uint32
		for d := 1; d <= 31; d++ {
			w := (first + d - 1) % 7
			if c.dow&(1<<w) != 0 || c.dowNth[w]&(1<<((d-1)/7+1)) != 0 {
				m |= 1 << d
			}
		}
		c.byFirst[first] = m
	}
	return c, nil
}

// dstRule is the daylight-saving rule of c: wildcard jobs follow the wall
// clock.
func (c *cronSpec) dstRule() dstRule {
	if c.wildcard {
		return dstWallClock
	}
	return dstFixedTime
}

// parseField parses one comma-separated field into c.
func (c *cronSpec) parseField(field int, s string) error {
	var set uint64
	for elem := range strings.SplitSeq(s, ",") {
		if elem == "" {
			return fmt.Errorf("empty list element")
		}
		special, err := c.parseSpecial(field, elem)
		if err != nil {
			return err
		}
		if special {
			continue
		}
		a, b, step, err := parseRange(field, elem)
		if err != nil {
			return err
		}
		for v := a; v <= b; v += step {
			set |= 1 << v
		}
	}
	c.setField(field, set)
	return nil
}

// parseSpecial parses the elements that name days rather than a range:
// day-of-month L, day-of-week DOW#n and DOWL. It reports whether elem was
// one.
func (c *cronSpec) parseSpecial(field int, elem string) (bool, error) {
	if field == fieldDOM && strings.EqualFold(elem, "L") {
		c.domLast = true
		return true, nil
	}
	if field != fieldDOW {
		return false, nil
	}
	if i := strings.IndexByte(elem, '#'); i >= 0 {
		w, err := parseValue(elem[:i], field)
		if err != nil {
			return false, err
		}
		n, err := strconv.Atoi(elem[i+1:])
		if err != nil || n < 1 || n > 5 || len(elem[i+1:]) > 1 {
			return false, fmt.Errorf("%q: the week number after # must be 1 to 5", elem)
		}
		c.dowNth[w%7] |= 1 << n
		return true, nil
	}
	if len(elem) > 1 && (elem[len(elem)-1] == 'L' || elem[len(elem)-1] == 'l') {
		w, err := parseValue(elem[:len(elem)-1], field)
		if err != nil {
			return false, err
		}
		c.dowLast |= 1 << (w % 7)
		return true, nil
	}
	return false, nil
}

// parseRange parses one list element of field: *, a value or a range a-b,
// each optionally followed by /step. It returns the first and last values and
// the step.
func parseRange(field int, elem string) (a, b, step int, err error) {
	lo, hi := fieldBounds[field][0], fieldBounds[field][1]
	rng, stepStr, hasStep := strings.Cut(elem, "/")
	step = 1
	if hasStep {
		n, err := strconv.Atoi(stepStr)
		if err != nil || len(stepStr) > 3 || n < 1 {
			return 0, 0, 0, fmt.Errorf("%q: the step after / must be a positive number", elem)
		}
		step = n
	}
	switch {
	case rng == "*":
		return lo, hi, step, nil
	case strings.Contains(rng, "-"):
		as, bs, _ := strings.Cut(rng, "-")
		if a, err = parseValue(as, field); err != nil {
			return 0, 0, 0, err
		}
		if b, err = parseValue(bs, field); err != nil {
			return 0, 0, 0, err
		}
		if field == fieldDOW && b == 0 && a > 0 {
			b = 7 // FRI-SUN: Sunday as the end of a range is 7
		}
		if a > b {
			return 0, 0, 0, fmt.Errorf("%q: range runs backwards", elem)
		}
		return a, b, step, nil
	}
	if a, err = parseValue(rng, field); err != nil {
		return 0, 0, 0, err
	}
	if hasStep {
		return a, hi, step, nil // a/n: from a to the end of the field, every n
	}
	return a, a, step, nil
}

// setField stores the values of field parsed into set.
func (c *cronSpec) setField(field int, set uint64) {
	switch field {
	case fieldSecond:
		c.seconds = set
	case fieldMinute:
		c.minutes = set
	case fieldHour:
		c.hours = uint32(set)
	case fieldDOM:
		c.dom = uint32(set)
	case fieldMonth:
		c.months = uint16(set)
	case fieldDOW:
		if set&(1<<7) != 0 {
			set |= 1
		}
		c.dow = uint8(set & 0x7f)
	}
}

// parseValue parses a number or, for months and weekdays, a three-letter name.
func parseValue(s string, field int) (int, error) {
	lo, hi := fieldBounds[field][0], fieldBounds[field][1]
	if s == "" {
		return 0, fmt.Errorf("missing value")
	}
	if s[0] >= '0' && s[0] <= '9' {
		if len(s) > 2 {
			return 0, fmt.Errorf("%q is out of range %d-%d", s, lo, hi)
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number", s)
		}
		if n < lo || n > hi {
			return 0, fmt.Errorf("%d is out of range %d-%d", n, lo, hi)
		}
		return n, nil
	}
	var names map[string]int
	switch field {
	case fieldMonth:
		names = monthNames
	case fieldDOW:
		names = dowNames
	}
	if n, ok := names[strings.ToLower(s)]; ok {
		return n, nil
	}
	return 0, fmt.Errorf("%q is not a number or name", s)
}

// dayMask returns the bits (1–31) of the days of month m of year y that match
// the day-of-month and day-of-week fields.
func (c *cronSpec) dayMask(y int64, m int) uint32 {
	dim := contract.DaysIn(int(y), time.Month(m))
	valid := uint32(1)<<(dim+1) - 2
	first := weekdayOfDays(daysFromCivil(y, m, 1))
	domM := c.dom
	if c.domLast {
		domM |= 1 << dim
	}
	dowM := c.byFirst[first]
	if c.dowLast != 0 {
		for w := range 7 {
			if c.dowLast&(1<<w) != 0 {
				d := 1 + (w-first+7)%7
				d += (dim - d) / 7 * 7
				dowM |= 1 << d
			}
		}
	}
	if c.domStar || c.dowStar {
		return domM & dowM & valid
	}
	return (domM | dowM) & valid
}

// nextBit returns the lowest set bit of mask at or above position from, or -1.
func nextBit(mask uint64, from int) int {
	if from >= 64 {
		return -1
	}
	m := mask >> uint(from) << uint(from)
	if m == 0 {
		return -1
	}
	return bits.TrailingZeros64(m)
}

// nextCivil returns the first wall second at or after ws that matches all
// fields, searching field by field: year, month, day, hour, minute, second.
// It gives up (false) once the year passes limitYear.
func (c *cronSpec) nextCivil(ws int64, limitYear int64) (int64, bool) {
	t := civilOf(ws)
	y, m, d, h, mi, s := t.year, t.month, t.day, t.hour, t.minute, t.second
	for y <= limitYear {
		// Month.
		nm := nextBit(uint64(c.months), m)
		if nm < 0 || nm > 12 {
			y, m, d, h, mi, s = y+1, 1, 1, 0, 0, 0
			continue
		}
		if nm != m {
			m, d, h, mi, s = nm, 1, 0, 0, 0
		}
		// Day.
		nd := nextBit(uint64(c.dayMask(y, m)), d)
		if nd < 0 {
			m, d, h, mi, s = m+1, 1, 0, 0, 0
			continue
		}
		if nd != d {
			d, h, mi, s = nd, 0, 0, 0
		}
		// Hour.
		nh := nextBit(uint64(c.hours), h)
		if nh < 0 {
			d, h, mi, s = d+1, 0, 0, 0
			continue
		}
		if nh != h {
			h, mi, s = nh, 0, 0
		}
		// Minute.
		nmi := nextBit(c.minutes, mi)
		if nmi < 0 {
			h, mi, s = h+1, 0, 0
			continue
		}
		if nmi != mi {
			mi, s = nmi, 0
		}
		// Second.
		ns := nextBit(c.seconds, s)
		if ns < 0 {
			mi, s = mi+1, 0
			continue
		}
		return daysFromCivil(y, m, d)*secondsPerDay + int64(h*3600+mi*60+ns), true
	}
	return 0, false
}

// never explains why the spec can never fire, or returns "" when it can. The
// calendar repeats every 400 years, so one cycle decides.
func (c *cronSpec) never() string {
	for y := int64(2000); y < 2400; y++ {
		for m := 1; m <= 12; m++ {
			if c.months&(1<<m) != 0 && c.dayMask(y, m) != 0 {
				return ""
			}
		}
	}
	// Name the impossible day-of-month/month pairs in the common case.
	if c.dowStar && c.dowLast == 0 && !c.domLast {
		var ms []string
		for m := 1; m <= 12; m++ {
			if c.months&(1<<m) != 0 {
				ms = append(ms, monthLong[m])
			}
		}
		return fmt.Sprintf("no day in the day-of-month field occurs in %s", strings.Join(ms, ", "))
	}
	return "no date matches the day-of-month, month and day-of-week fields in any year"
}
