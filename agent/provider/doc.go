// Package provider decides how the agent's jobs are triggered and, for the
// chronos provider, keeps NAS's armed one-shots equal to what the agent wants.
//
// Decide picks the provider from the configuration alone (no network): the
// chronos provider when cron.provider is chronos and every cron.chronos
// setting is valid, otherwise the built-in timer, with the reasons.
//
// A Reconciler compares desired (every enabled job's future next_run_at)
// with armed (NAS's list) and provisions what is missing or changed and
// cancels what NAS holds but the agent no longer wants. It runs at start,
// after every job change and after every fire, and in a serving agent also
// on a resync timer, when the earliest slot is overdue by more than its
// grace, and when NAS asks for it; a failure is logged, counted, written to
// the state file in the home directory, and healed by the next reconcile,
// retried on a backoff timer. Past times are never armed: a slot that passed
// without a fire is recorded missed with NAS's reason (the instance was
// stopped, the fire was dead-lettered) or handed to the runtime's misfire
// policy ("no fire arrived"), also while NAS is unreachable (the backstop).
// A slot beyond NAS's horizon is armed as a refresh fire (RefreshPoint).
package provider
