package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/store"
)

func ptr[T any](v T) *T { return &v }

// TestEditJob: an edit keeps what the job has lived through, moves
// next_run_at only for a new schedule or zone, and bad input writes nothing.
func TestEditJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.add(t, JobSpec{ID: "e", Schedule: "every 1h", Window: "daily"})
	b.clock.Set(t0.Add(time.Hour))
	run := b.fire(t, "e", t0.Add(time.Hour))
	b.gate.finish(b.started(t), nil)
	b.wait(t, run.RunID)
	before := b.job(t, "e")

	j, _, err := b.rt.EditJob(ctx, "e", JobPatch{Name: ptr("renamed"), Overlap: ptr("allow")})
	if err != nil {
		t.Fatal(err)
	}
	if j.Name != "renamed" || j.Overlap != job.OverlapAllow || !j.NextRunAt.Equal(*before.NextRunAt) ||
		!j.CreatedAt.Equal(before.CreatedAt) || j.LastSuccessRun != run.RunID || j.Repeat.Completed != before.Repeat.Completed {
		t.Fatalf("edit without a new schedule: %+v", j)
	}

	b.clock.Set(t0.Add(90 * time.Minute))
	j, _, err = b.rt.EditJob(ctx, "e", JobPatch{Schedule: ptr("0 * * * *"), Timezone: ptr("Asia/Tokyo")})
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != "cron" || j.Timezone != "Asia/Tokyo" || !j.NextRunAt.Equal(t0.Add(2*time.Hour)) || j.LastSuccessRun != run.RunID {
		t.Fatalf("retimed: %+v", j)
	}

	saved, err := os.ReadFile(filepath.Join(b.home, store.JobsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []JobPatch{{Schedule: ptr("whenever")}, {Misfire: ptr("often")}, {Timezone: ptr("Nowhere/City")}, {Repeat: ptr(-1)}} {
		if _, _, err := b.rt.EditJob(ctx, "e", p); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("patch %+v: %v, want ErrInvalidJob", p, err)
		}
	}
	if _, _, err := b.rt.EditJob(ctx, "nope", JobPatch{Name: ptr("x")}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v", err)
	}
	if now, _ := os.ReadFile(filepath.Join(b.home, store.JobsFile)); string(now) != string(saved) {
		t.Fatal("bad edits changed jobs.json")
	}
}

// TestEditPausedJob: a paused job stays paused through an edit; the slots
// passed under the old schedule are recorded, and the new schedule's slots
// are the ones recorded from then on.
func TestEditPausedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.add(t, JobSpec{ID: "p", Schedule: "every 1m"})
	if _, err := b.rt.Pause(ctx, "p", ""); err != nil {
		t.Fatal(err)
	}
	b.clock.Set(t0.Add(2*time.Minute + 30*time.Second))
	j, _, err := b.rt.EditJob(ctx, "p", JobPatch{Schedule: ptr("every 1h")})
	if err != nil {
		t.Fatal(err)
	}
	if j.Enabled || j.NextRunAt != nil || j.PausedFrom == nil || !j.PausedFrom.Equal(b.clock.Now().Add(time.Hour)) {
		t.Fatalf("edited paused job: enabled %v next %v paused_from %v", j.Enabled, j.NextRunAt, j.PausedFrom)
	}
	if got := b.states(t, "p"); got["skipped"] != 2 || len(got) != 1 {
		t.Fatalf("ledger %v, want the 2 slots passed under the old schedule", got)
	}
}

// TestEditNotifyComposes: a notify change applies to the policy as it is
// when the edit runs, so two edits of different notify settings both hold;
// a bad change is refused and changes nothing.
func TestEditNotifyComposes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.add(t, JobSpec{ID: "n", Schedule: "every 1h"})
	three := 3
	if _, _, err := b.rt.EditJob(ctx, "n", JobPatch{Notify: &notify.Change{NotifyAfter: &three}}); err != nil {
		t.Fatal(err)
	}
	j, _, err := b.rt.EditJob(ctx, "n", JobPatch{Notify: &notify.Change{Specs: []string{"file:/var/log/chronos-events.jsonl"}}})
	if err != nil {
		t.Fatal(err)
	}
	if j.NotifyAfter != 3 || len(j.Targets) != 1 || j.Targets[0].Path != "/var/log/chronos-events.jsonl" {
		t.Fatalf("policy after two edits: %+v", j.Policy)
	}
	zero := 0
	if _, _, err := b.rt.EditJob(ctx, "n", JobPatch{Notify: &notify.Change{NotifyAfter: &zero}}); !errors.Is(err, ErrInvalidJob) {
		t.Fatalf("notify_after 0: %v", err)
	}
	if got := b.job(t, "n"); got.NotifyAfter != 3 || len(got.Targets) != 1 {
		t.Fatalf("a refused edit changed the policy: %+v", got.Policy)
	}
}
