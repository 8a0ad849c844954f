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
// after every job change and after every fire; a failure is logged, counted,
// written to the state file in the home directory, and healed by the next
// reconcile, retried on a backoff timer (there is no periodic wake). Past
// times are never armed: overdue slots that NAS is not delivering are handed
// to the runtime's misfire policy (CatchUp). Fires NAS reports as failed are
// written to the run ledger as missed, with NAS's reason.
package provider
