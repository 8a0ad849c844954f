package jobfile

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// Flags are the flags of jobs add and jobs edit that say what a job is: its
// schedule, policies, payload and notify settings, and, for jobs add, its
// id, whether it starts paused and its kind. Spec and Patch turn the flags
// given into a job or a change of one; every error they return is the
// user's (bad or missing input).
type Flags struct {
	spec                                          agent.JobSpec
	pay                                           agent.PayloadSpec
	timeout, grace, retryBackoff, retryMaxBackoff time.Duration
	flex                                          time.Duration
	retryAttempts                                 int
	notify                                        notify.Change
	notifyAfter, renotifyEvery                    int
	paused                                        bool
	kind                                          KindFlags
}

// Register adds the flags jobs add and jobs edit share to f.
func (o *Flags) Register(f *pflag.FlagSet) {
	f.StringVar(&o.spec.Schedule, "schedule", "", "when to run: cron line, 'every 90s', 'in 30m', a timestamp or a phrase")
	f.StringVar(&o.spec.Timezone, "tz", "", "IANA time zone of the schedule (default the agent's timezone, else UTC)")
	f.StringVar(&o.spec.Name, "name", "", "human name of the job")
	f.IntVar(&o.spec.Repeat, "repeat", 0, "stop after this many runs (0: no limit)")
	f.StringVar(&o.spec.Misfire, "misfire", "", "overdue slots: run_once (default), skip, run_all")
	f.DurationVar(&o.grace, "grace", 0, "how late a slot may run before it counts as missed (default half the period, within 2m..2h)")
	f.DurationVar(&o.flex, "flex", 0, "flexible window: the fire may come up to this long after the slot and runs as it (whole seconds, at most 24h; 0: none)")
	f.StringVar(&o.spec.Overlap, "overlap", "", "a slot while a run is live: skip (default), queue_one, allow, replace")
	f.StringVar(&o.spec.Window, "window", "", "idempotency window: none (default), hourly, daily, weekly")
	f.StringVar(&o.spec.OnInterrupt, "on-interrupt", "", "the owner died mid-run: record (default), retry")
	f.DurationVar(&o.timeout, "timeout", 0, "stop a run after this long (0: no limit)")
	f.IntVar(&o.retryAttempts, "retry-attempts", 0, "under --on-interrupt retry: attempts in all (default 3)")
	f.DurationVar(&o.retryBackoff, "retry-backoff", 0, "under --on-interrupt retry: first wait, doubling (default 10s)")
	f.DurationVar(&o.retryMaxBackoff, "retry-max-backoff", 0, "under --on-interrupt retry: longest wait (default 5m)")
	f.StringArrayVar(&o.pay.Env, "env", nil, "KEY=VALUE added to a command's environment (repeatable)")
	f.StringVar(&o.pay.Dir, "dir", "", "working directory of a command")
	f.StringVar(&o.pay.HTTPURL, "http-url", "", "run an HTTP request to this URL instead of a command")
	f.StringVar(&o.pay.Method, "http-method", "", "HTTP method (default GET, or POST with a body)")
	f.StringArrayVar(&o.pay.Headers, "http-header", nil, "'Name: value' request header (repeatable)")
	f.StringVar(&o.pay.Body, "http-body", "", "HTTP request body")
	f.IntSliceVar(&o.pay.Accept, "http-accept", nil, "statuses that count as success (default any 2xx)")
	f.BoolVar(&o.pay.FollowRedirects, "http-follow-redirects", false, "follow redirects (default: a redirect is the answer)")
	f.StringArrayVar(&o.notify.Specs, "notify", nil, "tell a target of the job's runs: KIND:DEST[@EVENT,...], KIND webhook, command or file (repeatable; 'none' removes them)")
	f.IntVar(&o.notifyAfter, "notify-after", notify.DefaultNotifyAfter, "consecutive failures that raise the failed alert")
	f.IntVar(&o.renotifyEvery, "renotify-every", 0, "remind every this many further failures of an alerted streak (0: never)")
}

// RegisterAdd adds the flags only jobs add takes to f: --id, --paused and
// the kind flags (KindFlags).
func (o *Flags) RegisterAdd(f *pflag.FlagSet) {
	f.StringVar(&o.spec.ID, "id", "", "job id (default generated): letters, digits, . _ -")
	f.BoolVar(&o.paused, "paused", false, "create the job paused")
	o.kind.Register(f)
}

// NotifyChange returns the change of the job's notification policy the
// notify flags of f ask for (the zero Change when none was given).
func (o *Flags) NotifyChange(f *pflag.FlagSet) notify.Change {
	ch := o.notify
	ch.NotifyAfter, ch.RenotifyEvery = ifSet(f, "notify-after", &o.notifyAfter), ifSet(f, "renotify-every", &o.renotifyEvery)
	return ch
}

// Spec returns the job jobs add asks for with the flags of f, the command
// args after "--" and dash, the index of the first of them in the command's
// arguments (cobra's ArgsLenAtDash: -1 without "--"). Under --file, which
// must come alone (with --home and --json at most), it returns the flags'
// spec unchecked: the file holds the job. The notify flags are left to
// NotifyChange.
func (o *Flags) Spec(f *pflag.FlagSet, args []string, dash int) (agent.JobSpec, error) {
	spec := o.spec
	if f.Changed("file") {
		var err error
		f.Visit(func(fl *pflag.Flag) {
			if fl.Name != "file" && fl.Name != "json" && fl.Name != "home" || len(args) > 0 {
				err = errors.New("jobs add: --file takes the whole job: give no command and no flag but --home and --json")
			}
		})
		return spec, err
	}
	if strings.TrimSpace(spec.Schedule) == "" {
		return spec, errors.New("jobs add: --schedule is required")
	}
	p, err := o.payload(f, "add", args, dash)
	if err != nil {
		return spec, err
	}
	if err := agent.CheckFlex(o.flex); err != nil {
		return spec, fmt.Errorf("jobs add: --%w", err)
	}
	spec.Payload, spec.Timeout, spec.Grace, spec.Flex = *p, o.timeout, o.grace, o.flex
	if changedAny(f, "retry-attempts", "retry-backoff", "retry-max-backoff") && spec.OnInterrupt != string(job.InterruptRetry) && o.kind.Kind != job.JobKindFanout {
		return spec, errors.New("jobs add: --retry-* flags need --on-interrupt retry (or --kind fanout: each child's attempts)")
	}
	spec.Retry = o.retry()
	if spec.Paused = o.paused; spec.Paused {
		spec.PausedReason = "created paused"
	}
	return spec, o.kind.Apply(f.Changed, &spec)
}

// Patch returns the change jobs edit asks for with the flags of f, the
// command args after "--" (the job id left out) and dash (cobra's
// ArgsLenAtDash, counting the job id). Its Notify is NotifyChange's when a
// notify flag was given. Giving nothing to change is an error.
func (o *Flags) Patch(f *pflag.FlagSet, args []string, dash int) (agent.JobPatch, error) {
	p := agent.JobPatch{Name: ifSet(f, "name", &o.spec.Name), Schedule: ifSet(f, "schedule", &o.spec.Schedule),
		Timezone: ifSet(f, "tz", &o.spec.Timezone), Repeat: ifSet(f, "repeat", &o.spec.Repeat),
		Timeout: ifSet(f, "timeout", &o.timeout), Grace: ifSet(f, "grace", &o.grace), Flex: ifSet(f, "flex", &o.flex),
		Misfire: ifSet(f, "misfire", &o.spec.Misfire), Overlap: ifSet(f, "overlap", &o.spec.Overlap),
		Window: ifSet(f, "window", &o.spec.Window), OnInterrupt: ifSet(f, "on-interrupt", &o.spec.OnInterrupt)}
	if p.Flex != nil {
		if err := agent.CheckFlex(*p.Flex); err != nil {
			return p, fmt.Errorf("jobs edit: --%w", err)
		}
	}
	var err error
	if p.Payload, err = o.payload(f, "edit", args, dash); err != nil {
		return p, err
	}
	if changedAny(f, "retry-attempts", "retry-backoff", "retry-max-backoff") {
		r := o.retry()
		p.Retry = &r
	}
	if changedAny(f, "notify", "notify-after", "renotify-every") {
		ch := o.NotifyChange(f)
		p.Notify = &ch
	}
	if p == (agent.JobPatch{}) {
		return p, errors.New("jobs edit: nothing to change: give the flags to change or a command after \"--\"")
	}
	return p, nil
}

// payload builds the payload from the command after "--" and the payload
// flags; nil when jobs edit is given none (the job keeps its payload).
func (o *Flags) payload(f *pflag.FlagSet, verb string, args []string, dash int) (*runner.Payload, error) {
	if verb == "edit" && dash > 0 {
		dash-- // after the job id
	}
	switch {
	case dash > 0:
		return nil, fmt.Errorf("jobs %s: unexpected argument %q before \"--\"", verb, args[0])
	case dash < 0 && len(args) > 0:
		return nil, fmt.Errorf("jobs %s: put the command after \"--\" (got %q)", verb, args[0])
	case changedAny(f, "http-method", "http-header", "http-body", "http-accept", "http-follow-redirects") && o.pay.HTTPURL == "":
		return nil, fmt.Errorf("jobs %s: --http-* flags need --http-url", verb)
	case o.pay.HTTPURL != "" && (len(o.pay.Env) > 0 || o.pay.Dir != ""):
		return nil, fmt.Errorf("jobs %s: --env and --dir apply to commands, not to --http-url", verb)
	case verb == "edit" && len(args) == 0 && !changedAny(f, "http-url", "env", "dir"):
		return nil, nil
	}
	o.pay.Command = args
	p, err := o.pay.Payload()
	if err != nil {
		return nil, fmt.Errorf("jobs %s: %w", verb, err)
	}
	return &p, nil
}

// retry returns the retry settings of the flags.
func (o *Flags) retry() job.Retry {
	return job.Retry{MaxAttempts: o.retryAttempts, Backoff: job.Duration(o.retryBackoff), MaxBackoff: job.Duration(o.retryMaxBackoff)}
}

// ifSet returns v when the flag name was given, else nil.
func ifSet[T any](f *pflag.FlagSet, name string, v *T) *T {
	if f.Changed(name) {
		return v
	}
	return nil
}

// changedAny reports whether any of the flags was given.
func changedAny(f *pflag.FlagSet, names ...string) bool {
	for _, n := range names {
		if f.Changed(n) {
			return true
		}
	}
	return false
}
