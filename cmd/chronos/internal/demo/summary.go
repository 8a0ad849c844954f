package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
)

// jobStats is what the ledger says about one job.
type jobStats struct {
	fires, ok, failed, dup, other int
	late                          []int64 // lateness of each fire, in ms
}

// summarize prints, per job, what the agent's ledger says happened in the
// ran time of the demo.
func summarize(out io.Writer, a *agentSide, h home, ran time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	runs, err := a.rt.Ledger().Runs(ctx, ledger.Filter{})
	if err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	printSummary(out, tally(runs), h, ran)
	return nil
}

// tally counts runs per job; every sample job has an entry, fired or not.
func tally(runs []ledger.Run) map[string]*jobStats {
	per := map[string]*jobStats{}
	for _, j := range sampleJobs {
		per[j.id] = &jobStats{}
	}
	for _, r := range runs {
		s := per[r.JobID]
		if s == nil {
			s = &jobStats{}
			per[r.JobID] = s
		}
		switch r.State {
		case ledger.StateDuplicate:
			s.dup++
			continue
		case ledger.StateSkipped, ledger.StateMissed:
			s.other++
			continue
		case ledger.StateSucceeded:
			s.ok++
		case ledger.StateFailed, ledger.StateInterrupted:
			s.failed++
		}
		s.fires++
		s.late = append(s.late, r.LatenessMS)
	}
	return per
}

// printSummary prints the table of per and the totals.
func printSummary(out io.Writer, per map[string]*jobStats, h home, ran time.Duration) {
	ids := make([]string, 0, len(per))
	for id := range per {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	where := "from the run ledger, removed with the temporary home"
	if h.kind == homeKept {
		where = "from the run ledger in " + filepath.Join(h.dir, "runs") + "; chronos runs list --home " + h.dir + " shows every run"
	}
	fmt.Fprintf(out, "\nSummary after %s (%s):\n", roundDur(ran), where)
	fmt.Fprintf(out, "  %-8s %6s %10s %7s %11s %15s %13s %13s\n", "JOB", "FIRES", "SUCCEEDED", "FAILED", "DUPLICATES", "MISSED/SKIPPED", "LATENESS p50", "LATENESS max")
	total := jobStats{}
	for _, id := range ids {
		s := per[id]
		p50, mx := "-", "-"
		if len(s.late) > 0 {
			sort.Slice(s.late, func(i, j int) bool { return s.late[i] < s.late[j] })
			p50 = roundDur(time.Duration(s.late[(len(s.late)-1)/2]) * time.Millisecond)
			mx = roundDur(time.Duration(s.late[len(s.late)-1]) * time.Millisecond)
		}
		fmt.Fprintf(out, "  %-8s %6d %10d %7d %11d %15d %13s %13s\n", id, s.fires, s.ok, s.failed, s.dup, s.other, p50, mx)
		total.fires += s.fires
		total.failed += s.failed
		total.dup += s.dup
	}
	fmt.Fprintf(out, "  %d fires, %d failures, %d duplicates answered without a second run.\n", total.fires, total.failed, total.dup)
}
