package schedule

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The oracle is the slow, obviously correct model: it walks the instants one
// step at a time (a minute for 5-field lines, a second for 6-field ones),
// reads the wall clock at each, and plays the cron daemon's clock handling:
//
//   - the wall clock moved by exactly one step: run what matches (a fixed-time
//     job only if this wall time is past the highest one already seen, so
//     a repeated hour runs it once);
//   - it jumped forward by less than 3 h: wildcard jobs run if the new time
//     matches; fixed-time jobs run once if the new time or any skipped one matches;
//   - it jumped back by less than 3 h: wildcard jobs run if the new time
//     matches; fixed-time jobs wait until the wall clock passes what it had reached;
//   - it jumped 3 h or more either way: a correction; run what matches the
//     new time and forget the old one.
//
// Matching is written out again here from the field sets, with the calendar
// taken from the time package, so it shares nothing with the fast search.

// oracleMatch reports whether wall second ws matches c.
func oracleMatch(c *cronSpec, ws int64) bool {
	t := time.Unix(ws, 0).UTC()
	y, mo, d := t.Date()
	dim := time.Date(y, mo+1, 0, 0, 0, 0, 0, time.UTC).Day()
	if c.seconds&(1<<t.Second()) == 0 || c.minutes&(1<<t.Minute()) == 0 ||
		c.hours&(1<<t.Hour()) == 0 || c.months&(1<<int(mo)) == 0 {
		return false
	}
	wd := int(t.Weekday())
	domOK := c.dom&(1<<d) != 0 || (c.domLast && d == dim)
	dowOK := c.dow&(1<<wd) != 0 ||
		c.dowNth[wd]&(1<<((d-1)/7+1)) != 0 ||
		(c.dowLast&(1<<wd) != 0 && d+7 > dim)
	if c.domStar || c.dowStar {
		return domOK && dowOK
	}
	return domOK || dowOK
}

// oracleFires returns every fire instant in [lo, hi).
func oracleFires(c *cronSpec, loc *time.Location, lo, hi, step int64) []int64 {
	// The offset is looked up again whenever x leaves the stretch it was read for.
	var segStart, segEnd, off int64 = 1, 0, 0
	wall := func(x int64) int64 {
		if x < segStart || x >= segEnd {
			tt := time.Unix(x, 0).In(loc)
			_, o := tt.Zone()
			s, e := tt.ZoneBounds()
			segStart, segEnd, off = math.MinInt64, math.MaxInt64, int64(o)
			if !s.IsZero() {
				segStart = s.Unix()
			}
			if !e.IsZero() {
				segEnd = e.Unix()
			}
		}
		return x + off
	}
	var fires []int64
	prev := wall(lo - step)
	high := prev
	for x := lo; x < hi; x += step {
		w := wall(x)
		jump := w - (prev + step)
		fire := false
		switch {
		case jump >= bigJump || jump <= -bigJump:
			fire = oracleMatch(c, w)
			high = w
		case jump > 0 && !c.wildcard:
			for v := prev + step; v <= w && !fire; v += step {
				fire = oracleMatch(c, v)
			}
		default:
			fire = oracleMatch(c, w) && (c.wildcard || w > high)
		}
		if w > high {
			high = w
		}
		prev = w
		if fire {
			fires = append(fires, x)
		}
	}
	return fires
}

// randomField writes a random cron field for field f.
func randomField(r *rand.Rand, f int) string {
	lo, hi := fieldBounds[f][0], fieldBounds[f][1]
	if f == fieldDOW {
		hi = 7
	}
	val := func() string {
		v := lo + r.IntN(hi-lo+1)
		switch {
		case f == fieldMonth && r.IntN(3) == 0:
			return strings.ToUpper(time.Month(v).String()[:3])
		case f == fieldDOW && r.IntN(3) == 0:
			return []string{"sun", "Mon", "TUE", "wed", "thu", "fri", "sat", "sun"}[v]
		case f == fieldHour && r.IntN(2) == 0:
			return strconv.Itoa([]int{0, 1, 2, 3, 23}[r.IntN(5)]) // hours where zones change
		}
		return strconv.Itoa(v)
	}
	rangeOf := func() string {
		a := lo + r.IntN(hi-lo+1)
		b := a + r.IntN(hi-a+1)
		return fmt.Sprintf("%d-%d", a, b)
	}
	var elems []string
	for n := 1 + r.IntN(3); n > 0; n-- {
		switch k := r.IntN(10); {
		case k < 3 && f == fieldDOM && r.IntN(3) == 0:
			elems = append(elems, "L")
		case k < 3 && f == fieldDOW && r.IntN(2) == 0:
			elems = append(elems, fmt.Sprintf("%d#%d", r.IntN(7), 1+r.IntN(5)))
		case k < 3 && f == fieldDOW:
			elems = append(elems, val()+"L")
		case k < 5:
			elems = append(elems, val())
		case k < 7:
			elems = append(elems, rangeOf())
		case k < 8:
			elems = append(elems, fmt.Sprintf("%s/%d", rangeOf(), 1+r.IntN(4)))
		default:
			return fmt.Sprintf("*/%d", 1+r.IntN(hi/2+1))
		}
	}
	if r.IntN(4) == 0 {
		return "*"
	}
	return strings.Join(elems, ",")
}

// randomCron writes a random line: dense in minutes so whole years stay busy.
func randomCron(r *rand.Rand, seconds bool) string {
	var fields []string
	if seconds {
		fields = append(fields, randomField(r, fieldSecond))
	}
	for f := fieldMinute; f <= fieldDOW; f++ {
		v := randomField(r, f)
		switch {
		case f >= fieldDOM && r.IntN(2) == 0:
			v = "*" // keep most lines alive on most days, DST days included
		case f == fieldHour && r.IntN(2) == 0:
			v = []string{"0", "1", "2", "23", "1,2", "0-3", "22-23"}[r.IntN(7)]
		}
		fields = append(fields, v)
	}
	return strings.Join(fields, " ")
}

var propertyZones = []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Asia/Kolkata"}

func propertySeed(t *testing.T) uint64 {
	seed := uint64(20260318)
	if v := os.Getenv("CHRONOS_PROPERTY_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHRONOS_PROPERTY_SEED: %v", err)
		}
		seed = n
	}
	return seed
}

// transitions returns the zone changes of loc in [lo, hi).
func transitions(loc *time.Location, lo, hi int64) []int64 {
	var out []int64
	for t := lo; t < hi; {
		_, end := time.Unix(t, 0).In(loc).ZoneBounds()
		if end.IsZero() || end.Unix() >= hi {
			break
		}
		e := end.Unix()
		if e <= t {
			// Go's bounds past the tz tables can lag on the last day of a
			// leap year; step over that day.
			t += secondsPerDay
			continue
		}
		if offsetAt(loc, e-1) != offsetAt(loc, e) { // only real changes, not year boundaries
			out = append(out, e)
		}
		t = e
	}
	return out
}

// randomYear picks a year inside the tz tables or, one time in three, past
// them (where zone rules come from the TZ string), leap years included.
func randomYear(r *rand.Rand) int {
	if r.IntN(3) == 0 {
		return 2040 + 4*r.IntN(6) + r.IntN(2)
	}
	return 2024 + r.IntN(12)
}

// checkAgainstOracle compares Next with the oracle's fires over [lo, hi).
func checkAgainstOracle(t *testing.T, r *rand.Rand, expr string, loc *time.Location, lo, hi, step int64) {
	t.Helper()
	s, err := Parse(expr, Options{Location: loc, Anchor: time.Unix(lo, 0)})
	if err != nil {
		// A never-firing line must also be silent in the oracle.
		c, perr := parseCron(expr)
		if perr != nil {
			t.Fatalf("Parse(%q): %v", expr, err)
		}
		if f := oracleFires(c, loc, lo, hi, step); len(f) > 0 {
			t.Fatalf("Parse(%q) says %v, but the oracle fires at %v", expr, err, time.Unix(f[0], 0).In(loc))
		}
		return
	}
	fires := oracleFires(s.cron, loc, lo, hi, step)
	fmtT := func(x int64) string { return time.Unix(x, 0).In(loc).Format(time.RFC3339) }
	check := func(after int64) {
		i := sort.Search(len(fires), func(i int) bool { return fires[i] > after })
		got, ok := s.Next(time.Unix(after, 0))
		switch {
		case i < len(fires):
			if !ok || got.Unix() != fires[i] {
				t.Fatalf("%q in %s: Next(%s) = %s (%v), oracle %s", expr, loc, fmtT(after), got.Format(time.RFC3339), ok, fmtT(fires[i]))
			}
			if got.Location() != loc {
				t.Fatalf("%q: Next result in %v, want %v", expr, got.Location(), loc)
			}
		case ok && got.Unix() < hi:
			t.Fatalf("%q in %s: Next(%s) = %s, oracle has no fire before %s", expr, loc, fmtT(after), got.Format(time.RFC3339), fmtT(hi))
		}
	}
	check(lo - 1)
	// Every fire near a zone change, a sample of the others, and random instants.
	near := transitions(loc, lo, hi)
	keep := 1.0
	if len(fires) > 1500 {
		keep = 1500 / float64(len(fires))
	}
	for _, f := range fires {
		isNear := false
		for _, tr := range near {
			if f > tr-2*secondsPerDay && f < tr+2*secondsPerDay {
				isNear = true
				break
			}
		}
		if isNear || r.Float64() < keep {
			check(f)
			check(f - 1)
		}
	}
	for _, tr := range near {
		for d := int64(-2 * 3600); d <= 2*3600; d += 600 {
			check(tr + d)
		}
	}
	for range 200 {
		check(lo + r.Int64N(hi-lo))
	}
}

// TestNextMatchesOracle: random 5-field lines over whole years in zones with
// every kind of change, minute by minute.
func TestNextMatchesOracle(t *testing.T) {
	t.Parallel()
	seed := propertySeed(t)
	cases := 18
	if testing.Short() {
		cases = 6
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range cases {
		expr := randomCron(r, false)
		zone := propertyZones[i%len(propertyZones)]
		year := randomYear(r)
		caseSeed := r.Uint64()
		t.Run(fmt.Sprintf("%d/%s/%d", i, zone, year), func(t *testing.T) {
			t.Parallel()
			loc := loadLoc(t, zone)
			lo := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
			hi := time.Date(year+1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
			t.Logf("seed %d: %q", seed, expr)
			checkAgainstOracle(t, rand.New(rand.NewPCG(caseSeed, 2)), expr, loc, lo, hi, 60)
		})
	}
}

// TestNextMatchesOracleDSTDays: many random 5-field lines, minute by minute,
// over four days around every zone change of a random year.
func TestNextMatchesOracleDSTDays(t *testing.T) {
	t.Parallel()
	seed := propertySeed(t)
	cases := 120
	if testing.Short() {
		cases = 30
	}
	r := rand.New(rand.NewPCG(seed, 5))
	for i := range cases {
		expr := randomCron(r, false)
		zone := propertyZones[1+i%(len(propertyZones)-2)] // the zones with changes
		year := randomYear(r)
		caseSeed := r.Uint64()
		t.Run(fmt.Sprintf("%d/%s/%d", i, zone, year), func(t *testing.T) {
			t.Parallel()
			loc := loadLoc(t, zone)
			trs := transitions(loc, time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(year+1, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
			if len(trs) == 0 {
				t.Fatalf("%s has no changes in %d", zone, year)
			}
			for _, tr := range trs {
				checkAgainstOracle(t, rand.New(rand.NewPCG(caseSeed, 6)), expr, loc, tr-2*secondsPerDay, tr+2*secondsPerDay, 60)
			}
		})
	}
}

// TestNextMatchesOracleSeconds: random 6-field lines second by second over
// two days around each zone's changes of one year.
func TestNextMatchesOracleSeconds(t *testing.T) {
	t.Parallel()
	seed := propertySeed(t)
	cases := 12
	if testing.Short() {
		cases = 4
	}
	r := rand.New(rand.NewPCG(seed, 3))
	for i := range cases {
		expr := randomCron(r, true)
		zone := propertyZones[1+i%(len(propertyZones)-2)] // the zones with changes
		year := randomYear(r)
		pick := r.IntN(2)
		caseSeed := r.Uint64()
		t.Run(fmt.Sprintf("%d/%s/%d", i, zone, year), func(t *testing.T) {
			t.Parallel()
			loc := loadLoc(t, zone)
			trs := transitions(loc, time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).Unix(), time.Date(year+1, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
			if len(trs) == 0 {
				t.Fatalf("%s has no changes in %d", zone, year)
			}
			tr := trs[pick%len(trs)]
			t.Logf("seed %d: %q around %s", seed, expr, time.Unix(tr, 0).In(loc).Format(time.RFC3339))
			checkAgainstOracle(t, rand.New(rand.NewPCG(caseSeed, 4)), expr, loc, tr-secondsPerDay, tr+secondsPerDay, 1)
		})
	}
}

// TestOracleKnownDays pins the oracle itself to hand-checked DST days, so a
// wrong oracle cannot agree with a wrong Next.
func TestOracleKnownDays(t *testing.T) {
	t.Parallel()
	ny := loadLoc(t, "America/New_York")
	lo := mustTime(t, "2026-11-01T00:00:00-04:00").Unix()
	hi := mustTime(t, "2026-11-01T03:00:00-05:00").Unix()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"30 1 * * *", []string{"2026-11-01T01:30:00-04:00"}},
		{"30 * * * *", []string{"2026-11-01T00:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:30:00-05:00"}},
	} {
		c, err := parseCron(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, f := range oracleFires(c, ny, lo, hi, 60) {
			got = append(got, time.Unix(f, 0).In(ny).Format(time.RFC3339))
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("oracle %q: %v, want %v", tc.expr, got, tc.want)
		}
	}
	lo = mustTime(t, "2026-03-08T00:00:00-05:00").Unix()
	hi = mustTime(t, "2026-03-08T05:00:00-04:00").Unix()
	c, _ := parseCron("0,30 2 * * *")
	if got := oracleFires(c, ny, lo, hi, 60); len(got) != 1 || time.Unix(got[0], 0).In(ny).Format(time.RFC3339) != "2026-03-08T03:00:00-04:00" {
		t.Errorf("oracle spring gap: %v", got)
	}
}
