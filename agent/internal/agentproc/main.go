// Command agentproc is a small agent process driven by the agent package's
// multi-process tests. It is not part of the product.
//
//	agentproc race  -home H -job J -last T -out F   claim every slot of J up to T, log wins to F
//	agentproc serve -home H [-allow-private] [-notify-lease D]
//	                                                 run the built-in timer (and the notifier) until SIGTERM
//	agentproc add   -home H -id J -schedule S -- CMD add a shell job
//	agentproc catchup -home H                        one CatchUp, as another agent on the host
//	agentproc fanout -home H [-run J]                run job J now and wait for it, or (no -run)
//	                                                 recover and wait for the fanout left in H
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "agentproc: mode required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "race":
		err = race(os.Args[2:])
	case "serve":
		err = serve(os.Args[2:])
	case "add":
		err = add(os.Args[2:])
	case "catchup":
		err = catchUp(os.Args[2:])
	case "fanout":
		err = fanoutRun(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentproc:", err)
		os.Exit(1)
	}
}

// noop succeeds at once.
type noop struct{}

func (noop) Validate(runner.Payload) error { return nil }
func (noop) Run(context.Context, runner.Request) runner.Result {
	return runner.Result{}
}

// clock is a settable clock: each slot is claimed "at" its own time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

func race(args []string) error {
	fs := flag.NewFlagSet("race", flag.ContinueOnError)
	home := fs.String("home", "", "home")
	job := fs.String("job", "", "job id")
	lastS := fs.String("last", "", "last slot")
	out := fs.String("out", "", "wins file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	last, err := time.Parse(time.RFC3339, *lastS)
	if err != nil {
		return err
	}
	ctx := context.Background()
	c := &clock{}
	rt, err := agent.Open(ctx, agent.Config{Home: *home, Now: c.now, LeaseTTL: 24 * time.Hour,
		LockTimeout: time.Minute, Runners: map[string]runner.Runner{"noop": noop{}}, Retention: -1})
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	var wins strings.Builder
	for {
		j, err := rt.Job(ctx, *job)
		if err != nil {
			return err
		}
		if j.NextRunAt == nil || j.NextRunAt.After(last) {
			break
		}
		slot := *j.NextRunAt
		c.set(slot)
		res, err := rt.Fire(ctx, *job, slot, agent.TriggerScheduled)
		if err != nil {
			return err
		}
		if res.Status == agent.FireAccepted && !res.Skipped {
			fmt.Fprintf(&wins, "%s %s\n", slot.UTC().Format(time.RFC3339), res.RunID)
		}
	}
	if _, err := f.WriteString(wins.String()); err != nil {
		return err
	}
	return rt.Close(ctx)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	home := fs.String("home", "", "home")
	private := fs.Bool("allow-private", false, "let webhooks reach loopback and private addresses")
	lease := fs.Duration("notify-lease", 0, "the notifier's claim lease")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rt, err := agent.Open(ctx, agent.Config{Home: *home, Retention: -1,
		NotifyAddresses: notify.AddressPolicy{AllowPrivate: *private},
		Notify:          notify.Options{Lease: *lease, Backoff: 50 * time.Millisecond, Poll: 100 * time.Millisecond}})
	if err != nil {
		return err
	}
	fmt.Println("ready", os.Getpid())
	if err := rt.RunTimer(ctx); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rt.Close(cctx)
}

// openHome adds -home to fs, parses args with it and opens that home's
// runtime as another agent process on the host would: with the default
// settings, keeping every run. It returns the home too.
func openHome(ctx context.Context, fs *flag.FlagSet, args []string) (*agent.Runtime, string, error) {
	home := fs.String("home", "", "home")
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	rt, err := agent.Open(ctx, agent.Config{Home: *home, Retention: -1})
	return rt, *home, err
}

func add(args []string) error {
	fs := flag.NewFlagSet("add", flag.ContinueOnError)
	id := fs.String("id", "", "job id")
	sched := fs.String("schedule", "", "schedule")
	onInt := fs.String("on-interrupt", "", "policy")
	ctx := context.Background()
	rt, _, err := openHome(ctx, fs, args)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	_, _, err = rt.AddJob(ctx, agent.JobSpec{ID: *id, Schedule: *sched, OnInterrupt: *onInt,
		Retry:   job.Retry{Backoff: 0},
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: strings.Join(fs.Args(), " ")}}})
	return err
}

func catchUp(args []string) error {
	fs := flag.NewFlagSet("catchup", flag.ContinueOnError)
	ctx := context.Background()
	rt, _, err := openHome(ctx, fs, args)
	if err != nil {
		return err
	}
	if err := rt.CatchUp(ctx); err != nil {
		_ = rt.Close(ctx)
		return err
	}
	return rt.Close(ctx)
}

func fanoutRun(args []string) error {
	fs := flag.NewFlagSet("fanout", flag.ContinueOnError)
	job := fs.String("run", "", "job to run now")
	ctx := context.Background()
	rt, home, err := openHome(ctx, fs, args)
	if err != nil {
		return err
	}
	defer rt.Close(ctx)
	var runID string
	if *job != "" {
		res, err := rt.RunNow(ctx, *job, agent.RunOptions{})
		if err != nil {
			return err
		}
		runID = res.RunID
	} else {
		plans, err := filepath.Glob(filepath.Join(fanout.Dir(home), "*.json"))
		if err != nil || len(plans) != 1 {
			return fmt.Errorf("want one fanout plan, found %d (%v)", len(plans), err)
		}
		runID = strings.TrimSuffix(filepath.Base(plans[0]), ".json")
		if err := rt.Recover(ctx); err != nil {
			return err
		}
	}
	fmt.Println("run", runID)
	r, err := rt.Wait(ctx, runID, time.Now().Add(-time.Hour))
	if err != nil {
		return err
	}
	fmt.Println("ended", r.State)
	return nil
}
