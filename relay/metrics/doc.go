// Package metrics is the relay's Prometheus metrics, the one set NAS and a
// relay process (chronos relay) both serve: the store's gauges, read from
// the engine at scrape time (chronos_relay_armed, chronos_relay_due_backlog,
// chronos_relay_leased, chronos_relay_dead_letter, chronos_relay_held_fires,
// chronos_relay_probing_agents, chronos_relay_store_up,
// chronos_relay_store_lost), and what dispatchers observe
// (chronos_relay_dispatch_lag_seconds, chronos_relay_outcomes_total{kind},
// chronos_relay_retries_total{cold}, chronos_relay_dead_lettered_total).
//
// A process registers one Store collector per engine and one Dispatch per
// registry, shared by all its dispatchers.
package metrics
