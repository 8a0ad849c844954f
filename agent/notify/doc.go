// Package notify tells people what a job's runs did, exactly once per
// notification id, through an outbox.
//
// A job's Policy (jobs.json keys "notify", "notify_after",
// "renotify_every") lists Targets: a webhook (POST of the event JSON,
// signed with Standard Webhooks v1, webhook-id and Idempotency-Key equal to
// the notification id, through a client that refuses non-public addresses
// at dial time), a command (argv run with CHRONOS_* variables and the JSON
// on stdin) or a file (one JSON line appended and fsynced). Each target
// filters events with "on": succeeded, failed, missed, interrupted,
// recovered. A job's Streak decides the alerts: failed once notify_after
// consecutive failures are reached, a reminder every renotify_every
// further failures, one recovered on the first success after an alerted
// streak.
//
// # The outbox
//
// A side effect cannot be made atomic with a state change, so the side
// effect becomes state: a Notification row, owed until a Notifier has
// delivered it. Plan turns a finished run into the job's next Streak and
// its rows; NotificationID derives each row's id from the run id, the
// event and the target, so the same run always owes the same ids.
//
// The run path makes the rows durable in the same step as the run's final
// state: the store write that drops the run's claim and records its status
// also stores the job's next Streak and the rows Plan returned, pending
// hand-over, in jobs.json. After that write the run path Adds the rows to
// the FileOutbox, wakes the Notifier, and removes them from jobs.json in a
// later write. Add is idempotent by id, so on start the agent Adds every row
// still waiting in jobs.json again: a crash between the two writes loses
// nothing and duplicates nothing. The ledger line of the run's end and the
// lines for sent and dead notifications (from Options.Observe) name the ids.
//
// The Notifier drains the outbox wherever the agent runs. It claims a due
// row with a lease (as runs are claimed), sends it with a deadline before
// the lease ends, and records the attempt under the claim's token; a
// superseded claim's record is refused (ErrStaleClaim). Retries back off
// exponentially with jitter and honour Retry-After; a row still failing
// after the give-up time is dead, visible in List and replayable under the
// same id with Replay. Delivery is at least once: a sender that dies after
// the target took a notification but before recording it lets the lease
// run out, and another sender delivers the same id again, which receivers
// de-duplicate on. Two Notifiers on one home never send one id at the same
// time.
package notify
