// Package agent is the agent side of Chronos as a library: the Runtime that
// applies the job model's policies (package job) and keeps the promise "once
// per slot, never lost, never silent".
//
// A Runtime owns one home directory: jobs.json (package store), the run
// ledger runs/YYYY-MM-DD.jsonl (package ledger) and run output under
// output/<job>/<run>.log. Every fire goes through one path, Fire: under the
// store's exclusive lock it checks that the job's next_run_at equals the slot
// (a compare-and-set), applies the job's policies, records a claim with the
// owner (host:pid:uuid), a fencing token and a lease, advances next_run_at
// past now, and only then starts the run in the background. Any number of
// processes may share a home; exactly one wins each slot.
//
// Policies per job:
//
//   - misfire (slots found overdue beyond the grace window when the agent
//     starts or wakes): run_once (default), skip, run_all (bounded);
//   - overlap (a slot comes while a run is live): skip (default), queue_one,
//     allow, replace;
//   - idempotency window (none, hourly, daily, weekly in the job's zone): a
//     run that succeeded in the slot's window blocks another unless forced;
//   - on interrupt (the owner died mid-run): record (default, at most once)
//     or retry (at least once, bounded attempts with backoff).
//
// Every decision that does not run a slot is written to the ledger with a
// reason (skipped, missed, duplicate, interrupted).
//
// Time: the Runtime reads one injected clock (Config.Now); lease expiry is
// judged by it. The built-in timer (RunTimer) sleeps until the earliest
// instant something is due and is woken by job changes, including changes
// made by other processes.
package agent
