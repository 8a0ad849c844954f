package fanout

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Outcome is how one child attempt ended.
type Outcome int

// Child outcomes.
const (
	// Succeeded: the child's command succeeded.
	Succeeded Outcome = iota + 1
	// Failed: it failed (error, exit status, per-item timeout).
	Failed
	// Stopped: it was stopped because the parent was cancelled or ended.
	Stopped
)

// Prior is what an earlier life of the parent left of one child: the
// attempts it used and whether it is finished (Final, with Outcome).
type Prior struct {
	Attempts int
	Final    bool
	Outcome  Outcome
}

// Config is one fanout's children.
type Config struct {
	// Items are the plan's items.
	Items []string
	// Prior is what already happened to items (resume), by index.
	Prior map[int]Prior
	// Concurrency bounds the children running at once (at least 1).
	Concurrency int
	// MaxAttempts is each child's attempts in all (at least 1).
	MaxAttempts int
	// Backoff is the wait before attempt n (2, 3, ...) of a child.
	Backoff func(attempt int) time.Duration
	// Run runs attempt of the child for item index i and reports how it
	// ended. It must return when ctx ends.
	Run func(ctx context.Context, i, attempt int) Outcome
}

// Summary counts the children by how they ended.
type Summary struct {
	Total     int
	Succeeded int
	Failed    int
	// NotRun counts children stopped or never started (the parent was
	// cancelled or timed out).
	NotRun int
	// FailedItems are the indexes of the failed children, ascending.
	FailedItems []int
}

// Execute runs every unfinished child, at most cfg.Concurrency at once, in
// item order, retrying a failed one (after Backoff) until its attempts are
// used. When ctx ends, no child starts; the running ones see ctx end.
func Execute(ctx context.Context, cfg Config) Summary {
	conc := max(cfg.Concurrency, 1)
	maxA := max(cfg.MaxAttempts, 1)
	sum := Summary{Total: len(cfg.Items)}
	var mu sync.Mutex
	count := func(i int, o Outcome) {
		mu.Lock()
		defer mu.Unlock()
		switch o {
		case Succeeded:
			sum.Succeeded++
		case Failed:
			sum.Failed++
			sum.FailedItems = append(sum.FailedItems, i)
		default:
			sum.NotRun++
		}
	}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range cfg.Items {
		p := cfg.Prior[i]
		if p.Final {
			count(i, p.Outcome)
			continue
		}
		if p.Attempts >= maxA {
			count(i, Failed)
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			count(i, Stopped)
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			count(i, runChild(ctx, cfg, i, p.Attempts+1, maxA))
		})
	}
	wg.Wait()
	slices.Sort(sum.FailedItems)
	return sum
}

// runChild runs item i from attempt first until it succeeds, is stopped or
// has used maxA attempts.
func runChild(ctx context.Context, cfg Config, i, first, maxA int) Outcome {
	for a := first; ; a++ {
		if a > first && cfg.Backoff != nil {
			t := time.NewTimer(cfg.Backoff(a))
			select {
			case <-ctx.Done():
				t.Stop()
				return Stopped
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return Stopped
		}
		o := cfg.Run(ctx, i, a)
		if o != Failed || a >= maxA || ctx.Err() != nil {
			if o == Failed && ctx.Err() != nil {
				return Stopped
			}
			return o
		}
	}
}
