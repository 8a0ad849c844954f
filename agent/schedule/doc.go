// Package schedule parses the schedules people write for jobs (cron lines with
// time zones, intervals, one-shots and natural phrases) and computes their fire
// times as pure functions of the time asked about.
//
// A Schedule is immutable and safe for concurrent use. Next(after) returns the
// first fire strictly after `after` and never reads the clock; fires carry the
// schedule's zone.
//
// Cron schedules follow the cron daemon's documented rules (cronie, Debian
// cron(8)), applied in the schedule's own zone:
//
//   - day matching: if the day-of-month or day-of-week field starts with '*',
//     both must match, otherwise either may;
//   - a wildcard job (minute or hour field starting with '*', or @hourly)
//     follows the wall clock through daylight-saving changes;
//   - a fixed-time job whose time is skipped by a forward change of under 3 h
//     fires once, at the first instant after the gap; one whose time repeats
//     after a backward change of under 3 h fires only in the first pass;
//   - changes of 3 h or more are clock corrections: the new wall clock is
//     used as it is.
//
// The search for the next fire moves field by field over wall-clock time and
// stretch by stretch over a zone's offsets, never minute by minute. A line
// that matches no date in one 400-year Gregorian cycle never fires and is
// refused by Parse. docs/dst.md in the repository has worked examples.
package schedule
