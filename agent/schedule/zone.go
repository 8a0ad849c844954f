package schedule

import "time"

// bigJump is the size from which an offset change is a clock correction
// rather than a daylight-saving shift (rule 5).
const bigJump = 3 * 3600

// offsetSlack bounds |UTC offset| of any zone, with room to spare.
const offsetSlack = 2 * secondsPerDay

// segment is a stretch of time with one UTC offset: [start, end).
type segment struct {
	off        int64
	start, end int64
	hasStart   bool // false: the zone has no earlier change
	hasEnd     bool // false: the zone has no later change
}

// segmentAt returns the offset stretch of loc holding instant t (Unix seconds).
func segmentAt(loc *time.Location, t int64) segment {
	if loc == time.UTC {
		return segment{}
	}
	tt := time.Unix(t, 0).In(loc)
	_, off := tt.Zone()
	s, e := tt.ZoneBounds()
	seg := segment{off: int64(off)}
	if !s.IsZero() {
		seg.start, seg.hasStart = s.Unix(), true
	}
	if !e.IsZero() {
		seg.end, seg.hasEnd = e.Unix(), true
	}
	if seg.hasEnd && seg.end <= t {
		// Past its tables, Go's ZoneBounds can report an end at or before t
		// on the last day of a leap year. Take the bounds from a day later,
		// where they are right again, or find the change by bisection if
		// the offset differs there.
		later := t + secondsPerDay
		if offsetAt(loc, later) == seg.off {
			_, e2 := time.Unix(later, 0).In(loc).ZoneBounds()
			seg.end, seg.hasEnd = e2.Unix(), !e2.IsZero()
			if seg.hasEnd && seg.end <= later {
				seg.end = later
			}
		} else {
			seg.end = firstChange(loc, t, later, seg.off)
		}
	}
	return seg
}

// firstChange returns the first instant in (lo, hi] whose offset differs from
// off, given that hi's does.
func firstChange(loc *time.Location, lo, hi, off int64) int64 {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offsetAt(loc, mid) == off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// offsetAt returns the UTC offset of loc at instant t in seconds.
func offsetAt(loc *time.Location, t int64) int64 {
	_, off := time.Unix(t, 0).In(loc).Zone()
	return int64(off)
}

// civilNexter finds the first matching wall second at or after ws, giving up
// after limitYear.
type civilNexter interface {
	nextCivil(ws int64, limitYear int64) (int64, bool)
}

// dstRule is how a schedule's wall-clock matches meet a daylight-saving
// change (see nextInZone).
type dstRule int

// The rules of nextInZone.
const (
	// dstFixedTime is the rule of fixed-time jobs.
	dstFixedTime dstRule = iota
	// dstWallClock is the rule of wildcard jobs: they follow the wall clock.
	dstWallClock
)

// nextInZone returns the first fire instant at or after from (Unix seconds)
// of a schedule whose wall-clock matches come from cn, applying the DST rules
// in loc:
//
//   - dstWallClock (wildcard jobs): fires at every instant whose wall reading matches; wall times
//     skipped by a forward change never happen, repeated ones fire twice.
//   - dstFixedTime: a match skipped by a forward change of under 3 h fires once
//     at the instant the change happens (the first instant after the gap); a
//     match repeated by a backward change of under 3 h fires only in the
//     first pass. Changes of 3 h or more are clock corrections: the new wall
//     clock is used as it is (skipped times are not run, repeated ones are).
//
// The search walks offset stretches; inside a stretch it asks cn for the first
// wall match, so it never steps minute by minute. It stops after limitYear.
func nextInZone(loc *time.Location, from int64, rule dstRule, cn civilNexter, limitYear int64) (int64, bool) {
	wild := rule == dstWallClock
	t := from
	for range 1 << 16 {
		seg := segmentAt(loc, t)
		ws := t + seg.off
		if !wild && seg.hasStart {
			prevOff := offsetAt(loc, seg.start-1)
			// Fixed-time, starting exactly at a small forward change: what the
			// gap skipped fires now.
			if fwd := seg.off - prevOff; t == seg.start && fwd > 0 && fwd < bigJump {
				if c, ok := cn.nextCivil(seg.start+prevOff, limitYear); ok && c < ws {
					return t, true
				}
			}
			// Fixed-time: the second pass of a small backward change is skipped.
			if back := prevOff - seg.off; back > 0 && back < bigJump && t < seg.start+back {
				t = seg.start + back
				if seg.hasEnd && t >= seg.end {
					t = seg.end
					continue
				}
				ws = t + seg.off
			}
		}
		c, ok := cn.nextCivil(ws, limitYear)
		if !ok {
			return 0, false
		}
		if !seg.hasEnd || c < seg.end+seg.off {
			return c - seg.off, true
		}
		// The match lies at or beyond the wall reading where this stretch ends.
		if !wild {
			if fwd := offsetAt(loc, seg.end) - seg.off; fwd > 0 && fwd < bigJump && c < seg.end+seg.off+fwd {
				return seg.end, true // skipped by the gap: fire once right after it
			}
		}
		// Move on. When the stretch reaches far past the start reading, no
		// later instant can read earlier than ws, and nothing before
		// c-offsetSlack can read c or later: jump there directly.
		next := seg.end
		if seg.end-offsetSlack >= ws && c-offsetSlack > next {
			next = c - offsetSlack
		}
		if next <= t {
			next = t + 1 // never stand still, whatever the zone data says
		}
		t = next
	}
	return 0, false
}

// resolveLocal turns a wall reading into the instant a fixed-time job set for
// it fires: the reading itself, its first pass when it repeats, or the end of
// the gap when it is skipped.
func resolveLocal(loc *time.Location, ws int64) (int64, bool) {
	return nextInZone(loc, ws-offsetSlack, dstFixedTime, exactWall(ws), civilOf(ws).year+1)
}

// exactWall matches one wall second only.
type exactWall int64

func (w exactWall) nextCivil(ws int64, _ int64) (int64, bool) {
	if ws <= int64(w) {
		return int64(w), true
	}
	return 0, false
}
