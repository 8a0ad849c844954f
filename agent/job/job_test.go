package job

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/runner"
)

// fullJob sets every field of a job.
func fullJob() Job {
	t := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	return Job{ID: "a", Name: "n", Schedule: "every 1m", Kind: "interval", Timezone: "UTC", Enabled: true, PausedReason: "p",
		Repeat: Repeat{Times: 3, Completed: 1}, Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "echo"}},
		Timeout: Duration(time.Minute), Misfire: MisfireRunAll, Grace: Duration(time.Second), Overlap: OverlapQueueOne,
		Window: WindowDaily, OnInterrupt: InterruptRetry, Retry: Retry{MaxAttempts: 2, Backoff: Duration(time.Second), MaxBackoff: Duration(time.Hour)},
		Flex: Duration(30 * time.Second), JobKind: JobKindFanout,
		Workflow: &Workflow{DependsOn: []string{"b"}, Window: Duration(time.Hour), OnMissing: DecisionRun, OnDepFail: DecisionFail},
		Fanout: &Fanout{InputsFrom: "file:///x", Concurrency: 2, PerItemTimeout: Duration(time.Second), PartialTolerance: 0.5, ItemVar: "I",
			Reducer: &Reducer{Command: "r", RunOn: ReduceAlways}},
		NextRunAt: &t, LastRunAt: &t, LastStatus: "failed", LastError: "e", LastRunID: "r1", LastSuccessAt: &t, LastSuccessSlot: &t, LastSuccessRun: "r0",
		FailureStreak: 2, CreatedAt: t, UpdatedAt: t, FinishedAt: &t, PausedFrom: &t,
		Chain: &chain.Meta{ChainID: "c", Stage: "s"},
		Fence: 7, Claims: []Claim{{RunID: "r2", Slot: t, Trigger: "scheduled", Attempt: 1, Owner: "h:1:u", Token: 7, LeaseUntil: t, ClaimedAt: t, Forced: true,
			OwnerBoot: "b", OwnerNS: "n", OwnerStart: 9, Cancel: true, CancelReason: "why", Procs: []runner.Process{{PID: 3, Start: 4}}}},
		Pending: []Pending{{RunID: "r3", Slot: t, Trigger: "retry", Attempt: 2, NotBefore: t, Reason: "x", Forced: true, Cause: PendingRetry}},
	}
}

// wantJSON is a job as jobs.json has held it since format version 2 (what
// package store wrote when the model lived there): its keys and their
// forms must not change.
const wantJSON = `{"id":"a","name":"n","schedule":"every 1m","kind":"interval","timezone":"UTC","enabled":true,"paused_reason":"p","repeat":{"times":3,"completed":1},"payload":{"kind":"shell","shell":{"command":"echo"}},"timeout":"1m0s","misfire":"run_all","grace":"1s","overlap":"queue_one","window":"daily","on_interrupt":"retry","retry":{"max_attempts":2,"backoff":"1s","max_backoff":"1h0m0s"},"flex":"30s","job_kind":"fanout","workflow":{"depends_on":["b"],"window":"1h0m0s","on_missing":"run","on_dep_fail":"fail"},"fanout":{"inputs_from":"file:///x","concurrency":2,"per_item_timeout":"1s","partial_tolerance":0.5,"item_var":"I","reducer":{"command":"r","run_on":"always"}},"next_run_at":"2026-06-01T09:00:00Z","last_run_at":"2026-06-01T09:00:00Z","last_status":"failed","last_error":"e","last_run_id":"r1","last_success_at":"2026-06-01T09:00:00Z","last_success_slot":"2026-06-01T09:00:00Z","last_success_run":"r0","failure_streak":2,"created_at":"2026-06-01T09:00:00Z","updated_at":"2026-06-01T09:00:00Z","finished_at":"2026-06-01T09:00:00Z","paused_from":"2026-06-01T09:00:00Z","chain":{"chain_id":"c","chain_class":"","stage":"s","depth":0,"attempt":0,"expires_at":"0001-01-01T00:00:00Z","max_depth":0,"max_children":0},"fence":7,"claims":[{"run_id":"r2","slot":"2026-06-01T09:00:00Z","trigger":"scheduled","attempt":1,"owner":"h:1:u","token":7,"lease_until":"2026-06-01T09:00:00Z","claimed_at":"2026-06-01T09:00:00Z","forced":true,"owner_boot":"b","owner_ns":"n","owner_start":9,"cancel":true,"cancel_reason":"why","procs":[{"pid":3,"start":4}]}],"pending":[{"run_id":"r3","slot":"2026-06-01T09:00:00Z","trigger":"retry","attempt":2,"not_before":"2026-06-01T09:00:00Z","reason":"x","forced":true,"cause":"retry"}]}`

func TestJobJSONIsTheJobsFileFormat(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(fullJob())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != wantJSON {
		t.Fatalf("job encodes as\n%s\nwant\n%s", b, wantJSON)
	}
	var back Job
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	again, _ := json.Marshal(back)
	if string(again) != wantJSON {
		t.Fatalf("decoded and encoded again:\n%s", again)
	}
}
