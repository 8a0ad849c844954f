package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/schedule"
	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// maxScheduleCount bounds -n so a typo cannot ask for a billion lines.
const maxScheduleCount = 100000

func newScheduleCmd() *cobra.Command {
	return groupCmd("schedule", "Parse schedules and print their next fire times",
		newScheduleNextCmd(), newScheduleExplainCmd())
}

// scheduleFlags are the flags shared by the schedule subcommands.
type scheduleFlags struct {
	tz      string
	after   string
	count   int
	explain bool
	out     cmdline.Output
}

func (f *scheduleFlags) register(c *cobra.Command, defaultCount int) {
	c.Flags().StringVar(&f.tz, "tz", "", "time zone of the schedule when it has no CRON_TZ= prefix (default UTC)")
	c.Flags().StringVar(&f.after, "after", "", "RFC 3339 instant to start after; also the anchor of intervals and relative one-shots (default now)")
	c.Flags().IntVarP(&f.count, "count", "n", defaultCount, "number of fire times to print")
	f.out.Register(c, "the expression, how it is understood and the fire times")
}

// print prints the fires of l, text preceded by head, in one write so that
// a failure leaves nothing half printed.
func (f *scheduleFlags) print(w io.Writer, l agent.FireList, head string) error {
	return f.out.Print(w, l, func(w io.Writer) error {
		if _, err := io.WriteString(w, head+l.Times()); err != nil {
			return fmt.Errorf("write fire times: %w", err)
		}
		return nil
	})
}

func newScheduleNextCmd() *cobra.Command {
	var f scheduleFlags
	c := &cobra.Command{
		Use:   "next EXPR",
		Short: "Print the next fire times of a schedule, one RFC 3339 time per line",
		Long: `Print the next fire times of a schedule, one RFC 3339 time per line with the zone's offset.

EXPR is a cron line (5 or 6 fields, macros, optional CRON_TZ=Zone prefix), an interval
("every 15m"), a one-shot ("in 30m", "2026-06-18 09:00", an RFC 3339 time) or a phrase
("every monday 9am", "weekdays at 9am"). How it was understood goes to stderr when stderr
is a terminal or with --explain; stdout carries only the times.`,
		Example: `  chronos schedule next '0 9 * * 1-5' --tz Europe/Paris -n 3
  chronos schedule next 'CRON_TZ=America/New_York 30 2 * * *' --after 2026-03-07T00:00:00Z
  chronos schedule next 'every monday 9am' --explain
  chronos schedule next '*/15 * * * *' -n 2 --json | jq -r '.fires[]'`,
		Args: oneExpr,
		RunE: func(cmd *cobra.Command, args []string) error {
			sched, after, err := f.parse(args)
			if err != nil {
				return err
			}
			if f.explain || cmdline.IsTerminal(cmd.ErrOrStderr()) {
				fmt.Fprintln(cmd.ErrOrStderr(), sched.Describe())
			}
			return f.print(cmd.OutOrStdout(), agent.NewFireList(args[0], sched, after, f.count), "")
		},
	}
	f.register(c, 5)
	c.Flags().BoolVar(&f.explain, "explain", false, "say on stderr how the schedule was understood")
	return c
}

func newScheduleExplainCmd() *cobra.Command {
	var f scheduleFlags
	c := &cobra.Command{
		Use:     "explain EXPR",
		Short:   "Say how a schedule is understood and print its next fire times",
		Example: "  chronos schedule explain 'weekdays at 9am' --tz Europe/Paris\n  chronos schedule explain '0 3 * * *' --json",
		Args:    oneExpr,
		RunE: func(cmd *cobra.Command, args []string) error {
			sched, after, err := f.parse(args)
			if err != nil {
				return err
			}
			l := agent.NewFireList(args[0], sched, after, f.count)
			return f.print(cmd.OutOrStdout(), l, l.Description+"\n")
		},
	}
	f.register(c, 3)
	return c
}

// oneExpr accepts exactly one argument, the schedule expression: words left
// unquoted would otherwise be read as a different schedule (a trailing "0"
// turns a 5-field line into a 6-field one).
func oneExpr(cmd *cobra.Command, args []string) error {
	switch len(args) {
	case 0:
		return usagef("%s: missing EXPR (quote the schedule: '*/15 * * * *')", "schedule "+cmd.Name())
	case 1:
		return nil
	default:
		return usagef("%s: want one EXPR argument, got %d (quote the schedule: '%s')", "schedule "+cmd.Name(), len(args), strings.Join(args, " "))
	}
}

// parse validates the flags and the expression, and checks that the schedule
// fires at least once after the start instant.
func (f *scheduleFlags) parse(args []string) (*schedule.Schedule, time.Time, error) {
	if f.count < 1 || f.count > maxScheduleCount {
		return nil, time.Time{}, usagef("-n must be between 1 and %d, got %d", maxScheduleCount, f.count)
	}
	loc := time.UTC
	if f.tz != "" {
		l, err := time.LoadLocation(f.tz)
		if err != nil || f.tz == "Local" {
			return nil, time.Time{}, usagef("--tz: unknown time zone %q", f.tz)
		}
		loc = l
	}
	after := time.Now().Truncate(time.Second)
	if f.after != "" {
		t, err := schedule.ParseTime(f.after)
		if err != nil {
			return nil, time.Time{}, usagef("--after: %v", err)
		}
		after = t
	}
	sched, err := schedule.Parse(args[0], schedule.Options{Location: loc, Anchor: after})
	if err != nil {
		return nil, time.Time{}, asUsage(err)
	}
	if len(agent.Fires(sched, after, 1)) == 0 {
		return nil, time.Time{}, usagef("schedule %q never fires after %s", args[0], after.Format(time.RFC3339Nano))
	}
	return sched, after, nil
}
