// Command peerbench runs the same burst through Chronos and through asynq's
// scheduler on one Redis, alternating, and prints both with their ratio.
//
// For each round it runs `chronos bench relay` (the full chain: store,
// dispatchers, NAS signing an ES256 token per fire, an HTTP call to an agent
// sink that verifies it), then asynq tuned for a burst, then asynq with its
// defaults: N fires due at the same instant, each one's lag measured from
// its due time to its handler. asynq's handler does nothing.
//
// It expects a throwaway Redis: --start-redis starts one on a free loopback
// port and stops it after; with --redis, chronos keeps its keys under a
// fresh prefix and removes them, and each asynq run uses a fresh queue whose
// keys (asynq:{queue}:*) it removes, but both put load on that Redis.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// options are the command line.
type options struct {
	redisURL       string
	startRedis     bool
	redisServer    string
	n              int
	rounds         int
	at             time.Duration
	chronos        string
	asynq          string
	enqueueWorkers int
	timeout        time.Duration
	asJSON         bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("peerbench", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: peerbench (--redis redis://127.0.0.1:PORT | --start-redis) [flags]\n\n"+
			"Runs N fires due at once through chronos bench relay and through asynq's\n"+
			"scheduler, alternating, on one throwaway Redis, and prints both and the ratio.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.redisURL, "redis", "", "the Redis both run on, redis://host:port[/db]; a throwaway one: both put a burst's load on it")
	fs.BoolVar(&o.startRedis, "start-redis", false, "start a redis-server without persistence on a free loopback port, and stop it after")
	fs.StringVar(&o.redisServer, "redis-server", "redis-server", "with --start-redis: the redis-server binary")
	fs.IntVar(&o.n, "n", 10000, "fires due at the same instant")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds, each running chronos then asynq")
	fs.DurationVar(&o.at, "at", 0, "when the fires are due, after each run starts (default: 2s, or 80µs per fire if more)")
	fs.StringVar(&o.chronos, "chronos", "chronos", "the chronos binary")
	fs.StringVar(&o.asynq, "asynq", "both", "asynq settings: tuned, default or both")
	fs.IntVar(&o.enqueueWorkers, "enqueue-workers", 8, "goroutines enqueueing asynq tasks (chronos bench relay arms with 8)")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up on an asynq run's tasks this long after it starts (default: due + 1m + 1s per 1000 fires)")
	fs.BoolVar(&o.asJSON, "json", false, "print the report as JSON")
	_ = fs.Parse(os.Args[1:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

// validate checks the flags and fills in the defaults that depend on others.
func (o *options) validate() error {
	if (o.redisURL == "") == !o.startRedis {
		return errors.New("give either --redis or --start-redis")
	}
	if o.n <= 0 {
		return fmt.Errorf("--n %d: must be positive", o.n)
	}
	if o.rounds <= 0 {
		return fmt.Errorf("--rounds %d: must be positive", o.rounds)
	}
	if o.enqueueWorkers <= 0 {
		return fmt.Errorf("--enqueue-workers %d: must be positive", o.enqueueWorkers)
	}
	if _, err := o.profiles(); err != nil {
		return err
	}
	if o.at == 0 {
		o.at = max(2*time.Second, time.Duration(o.n)*80*time.Microsecond)
	}
	if o.at < 0 {
		return fmt.Errorf("--at %s: must not be negative", o.at)
	}
	if o.timeout == 0 {
		o.timeout = o.at + time.Minute + time.Duration(o.n/1000)*time.Second
	}
	if _, err := exec.LookPath(o.chronos); err != nil {
		return fmt.Errorf("--chronos: %w", err)
	}
	return nil
}

// profiles are the asynq settings --asynq asks for, in the order they run.
func (o *options) profiles() ([]asynqProfile, error) {
	switch o.asynq {
	case "tuned":
		return []asynqProfile{asynqTuned}, nil
	case "default":
		return []asynqProfile{asynqDefault}, nil
	case "both":
		return []asynqProfile{asynqTuned, asynqDefault}, nil
	}
	return nil, fmt.Errorf("--asynq %q: not tuned, default or both", o.asynq)
}

// run alternates the systems for the rounds asked and prints the report; a
// failed run ends the rounds, and what was measured is still printed.
func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	url := o.redisURL
	if o.startRedis {
		r, err := startRedis(ctx, o.redisServer)
		if err != nil {
			return err
		}
		defer r.stop()
		url = r.url
	}
	ropt, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	admin := redis.NewClient(ropt)
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", url, err)
	}
	profiles, _ := o.profiles()

	var rounds [][]*Result
	var runErr error
rounds:
	for i := range o.rounds {
		var round []*Result
		fmt.Fprintf(stderr, "round %d of %d: chronos\n", i+1, o.rounds)
		res, err := chronosRun{binary: o.chronos, redisURL: url, n: o.n, at: o.at}.run(ctx)
		if res != nil {
			round = append(round, res)
		}
		if err != nil {
			runErr = err
		}
		for _, p := range profiles {
			if runErr != nil {
				break
			}
			fmt.Fprintf(stderr, "round %d of %d: %s\n", i+1, o.rounds, p.system)
			a := asynqRun{profile: p, redisURL: url, n: o.n, at: o.at, enqueueWorkers: o.enqueueWorkers, timeout: o.timeout}
			res, err := a.run(ctx, admin)
			if res != nil {
				round = append(round, res)
			}
			runErr = err
		}
		if len(round) > 0 {
			rounds = append(rounds, round)
		}
		if runErr != nil {
			break rounds
		}
	}
	rep := newReport(o.n, rounds)
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return errors.Join(runErr, fmt.Errorf("write report: %w", err))
		}
	} else {
		rep.WriteText(stdout)
	}
	if runErr == nil {
		for _, round := range rounds {
			for _, r := range round {
				if r.Lost > 0 || r.Duplicates > 0 {
					runErr = fmt.Errorf("%s: %d fires lost, %d handled twice", r.System, r.Lost, r.Duplicates)
				}
			}
		}
	}
	return runErr
}
