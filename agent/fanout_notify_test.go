package agent

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/agent/fanout"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestFanoutPartialNotifies: a fanout parent that fails beyond its
// tolerance alerts failed; the next, partial within it, is a success that
// sends partial (default filter), succeeded (succeeded filter) and
// recovered, and nothing to a failed-only target. Every body counts the
// children and names the failed items.
func TestFanoutPartialNotifies(t *testing.T) {
	b := setup(t, loopback)
	dir := t.TempDir()
	file := func(name string, on ...notify.Event) notify.Target {
		return notify.Target{Kind: notify.KindFile, Path: filepath.Join(dir, name+".jsonl"), On: on}
	}
	targets := []notify.Target{file("default"), file("failed", notify.EventFailed),
		file("succeeded", notify.EventSucceeded), file("all", notify.Events...)}
	items := writeItems(t, []string{"bad-0", "bad-1"})
	b.add(t, JobSpec{ID: "scan", Schedule: "@yearly", Payload: shell(`case "$FANOUT_ITEM" in bad*) exit 3;; esac`),
		JobKind: job.JobKindFanout, Notify: notify.Policy{Targets: targets},
		Fanout: &job.Fanout{InputsFrom: items, Concurrency: 2, PartialTolerance: 0.5}})
	notifying(t, b.rt)

	first := b.runNow(t, "scan")
	if first.State != ledger.StateFailed {
		t.Fatalf("first parent %s (%s), want failed", first.State, first.Reason)
	}
	notificationLines(t, b.rt, 3) // failed to default, failed and all
	// The same job, now within its tolerance: one of four items fails.
	if err := os.WriteFile(strings.TrimPrefix(items, "file://"), []byte("ok-0\nbad-1\nok-2\nok-3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := b.runNow(t, "scan")
	if second.State != ledger.StatePartial {
		t.Fatalf("second parent %s (%s), want partial", second.State, second.Reason)
	}
	notificationLines(t, b.rt, 9)

	got := map[string][]string{}
	var partial notify.Body
	for _, tg := range targets {
		name := filepath.Base(tg.Path)
		for _, ev := range readEvents(t, tg.Path) {
			got[name] = append(got[name], string(ev.Event)+"/"+ev.Status)
			if ev.Fanout == nil {
				t.Fatalf("%s: event %s without fanout counts", name, ev.Event)
			}
			if ev.Event == notify.EventPartial {
				partial = ev
			}
		}
	}
	for _, evs := range got {
		slices.Sort(evs) // one run's events may be delivered in any order
	}
	want := map[string][]string{
		"default.jsonl":   {"failed/failed", "partial/partial", "recovered/partial"},
		"failed.jsonl":    {"failed/failed"},
		"succeeded.jsonl": {"succeeded/partial"},
		"all.jsonl":       {"failed/failed", "partial/partial", "recovered/partial", "succeeded/partial"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events per target %v, want %v", got, want)
	}
	wantCounts := &notify.Fanout{Items: 4, Succeeded: 3, Failed: 1, PartialTolerance: 0.5,
		FailedItems: []notify.FailedItem{{Index: 1, Item: "bad-1", RunID: fanout.ChildRunID(second.RunID, 1)}}}
	if partial.RunID != second.RunID || !reflect.DeepEqual(partial.Fanout, wantCounts) {
		t.Fatalf("partial event of %s: fanout %+v, want %+v", partial.RunID, partial.Fanout, wantCounts)
	}
	if j := b.job(t, "scan"); j.NotifyStreak != (notify.Streak{}) {
		t.Fatalf("streak after the partial run %+v, want reset", j.NotifyStreak)
	}
}

// recorder is an embedder's runner that records the requests it gets.
type recorder struct {
	mu   sync.Mutex
	reqs map[string]runner.Request
}

func (r *recorder) Validate(runner.Payload) error { return nil }

func (r *recorder) Run(_ context.Context, req runner.Request) runner.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs[req.RunID] = req
	return runner.Result{}
}

func (r *recorder) get(runID string) (runner.Request, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	req, ok := r.reqs[runID]
	return req, ok
}

// TestFanoutItemForEmbedderRunner: an embedder's runner gets each fanout
// child's item, index, item variable and parent run in Request.Fanout (and
// the item and parent run id in Env, as a shell child does); a run that is
// not a fanout child has no Fanout.
func TestFanoutItemForEmbedderRunner(t *testing.T) {
	t.Parallel()
	rec := &recorder{reqs: map[string]runner.Request{}}
	b := setup(t, func(c *Config) { c.Runners["rec"] = rec })
	items := []string{"alpha.example", "beta.example", "gamma.example"}
	b.add(t, JobSpec{ID: "emb", Schedule: "@yearly", Payload: runner.Payload{Kind: "rec"}, JobKind: job.JobKindFanout,
		Fanout: &job.Fanout{InputsFrom: writeItems(t, items), Concurrency: 2, ItemVar: "TARGET"}})
	p := b.runNow(t, "emb")
	if p.State != ledger.StateSucceeded {
		t.Fatalf("parent %s (%s)", p.State, p.Reason)
	}
	for i, item := range items {
		id := fanout.ChildRunID(p.RunID, i)
		req, ok := rec.get(id)
		if !ok {
			t.Fatalf("child %s never reached the runner", id)
		}
		want := &runner.FanoutItem{ParentRunID: p.RunID, Index: i, Item: item, Var: "TARGET"}
		if !reflect.DeepEqual(req.Fanout, want) {
			t.Fatalf("child %d: Fanout %+v, want %+v", i, req.Fanout, want)
		}
		if req.Env["TARGET"] != item || req.Env[EnvParentRunID] != p.RunID || req.Env[EnvRunHome] != b.home {
			t.Fatalf("child %d: Env %v", i, req.Env)
		}
	}
	b.add(t, JobSpec{ID: "plain", Schedule: "@yearly", Payload: runner.Payload{Kind: "rec"}})
	run := b.runNow(t, "plain")
	req, ok := rec.get(run.RunID)
	if _, has := req.Env[EnvParentRunID]; !ok || req.Fanout != nil || has || req.Env["TARGET"] != "" {
		t.Fatalf("plain run: reached %v, Fanout %+v, Env %v", ok, req.Fanout, req.Env)
	}
}
