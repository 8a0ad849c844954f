// Package schedule parses the schedules people write for jobs (cron lines with
// time zones, intervals, one-shots and natural phrases) and computes their fire
// times as pure functions of the time asked about.
package schedule
