// Package postgres is the relay engine on PostgreSQL: any number of NAS and
// relay processes share one database and together keep every armed
// one-shot, for operators who already run PostgreSQL with its backups,
// replicas and monitoring.
//
// # Layout
//
// The engine's tables live in one schema (Options.Schema, default
// "chronos"), written by versioned migrations embedded in the binary
// (schema/NNNN_name.sql, run by Migrate or Options.Migrate):
//
//	chronos_fires      one row per armed one-shot: armed row, due entry and lease
//	chronos_agents     one row per agent: its flow control policy and state
//	chronos_ties       one row per agent that armed: its fires armed due in one ms (ties), its arms' lock
//	chronos_dead       the dead letter and the agents' failed-fire feeds
//	chronos_meta       the epoch marker and the report of a lost store
//	chronos_instances, chronos_deliveries, chronos_last_fires, chronos_rekey,
//	chronos_history_minutes, chronos_recent_deliveries, chronos_beats
//
// # Time
//
// Due times and lease expiries are judged by PostgreSQL's clock
// (chronos_now_ms, clock_timestamp()), never a worker's, in milliseconds;
// a fire_at with a sub-millisecond fraction is due at the next millisecond.
//
// # Wake-ups
//
// A transition that makes an entry due earlier than dispatchers may be
// waiting for announces it with NOTIFY on the schema's channel; every
// engine LISTENs on one connection of its own and wakes its dispatchers. A
// lost listener reconnects and wakes them once it is back; the dispatchers'
// periodic recheck is the last net.
package postgres
