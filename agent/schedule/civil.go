package schedule

// Civil (wall-clock) arithmetic on the proleptic Gregorian calendar.
//
// A wall-clock reading is handled as "wall seconds": the number of seconds
// from 1970-01-01 00:00:00 to that reading as if it were UTC. An instant t in a
// zone whose offset is off reads as wall second t+off. Working on wall seconds
// keeps the field-by-field search free of time zones; zones come back in only
// where a wall reading is turned into an instant (zone.go).

const (
	secondsPerDay = 86400
	// daysPer400Years is the length of the Gregorian cycle. It is a multiple
	// of 7, so dates and weekdays repeat exactly every 400 years.
	daysPer400Years = 146097
)

// floorDiv returns a/b rounded toward negative infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// daysFromCivil returns the day number (days since 1970-01-01) of y-m-d.
func daysFromCivil(y int64, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400 // [0, 399]
	mp := int64(m + 9)
	if m > 2 {
		mp = int64(m - 3)
	}
	doy := (153*mp+2)/5 + int64(d) - 1     // [0, 365]
	doe := yoe*365 + yoe/4 - yoe/100 + doy // [0, 146096]
	return era*daysPer400Years + doe - 719468
}

// civilFromDays is the inverse of daysFromCivil.
func civilFromDays(z int64) (y int64, m, d int) {
	z += 719468
	era := floorDiv(z, daysPer400Years)
	doe := z - era*daysPer400Years
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = int(doy - (153*mp+2)/5 + 1)
	if mp < 10 {
		m = int(mp + 3)
	} else {
		m = int(mp - 9)
	}
	if m <= 2 {
		y++
	}
	return y, m, d
}

// weekdayOfDays returns the weekday (0 = Sunday) of a day number.
func weekdayOfDays(z int64) int {
	// 1970-01-01 was a Thursday.
	w := (z + 4) % 7
	if w < 0 {
		w += 7
	}
	return int(w)
}

// civil is a broken-down wall-clock reading.
type civil struct {
	year                 int64
	month, day           int
	hour, minute, second int
}

// civilOf breaks wall seconds down into fields.
func civilOf(ws int64) civil {
	days := floorDiv(ws, secondsPerDay)
	sod := int(ws - days*secondsPerDay)
	y, m, d := civilFromDays(days)
	return civil{year: y, month: m, day: d, hour: sod / 3600, minute: sod / 60 % 60, second: sod % 60}
}

// wallSeconds turns fields back into wall seconds.
func (c civil) wallSeconds() int64 {
	return daysFromCivil(c.year, c.month, c.day)*secondsPerDay + int64(c.hour*3600+c.minute*60+c.second)
}
