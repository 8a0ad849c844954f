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
//	chronos_revoked_sessions  operator sessions NAS logged out (nas.SessionRevoker)
//	chronos_schema_migrations the migrations applied
//
// A one-shot is one row of chronos_fires: its state says whether it is
// queued (due when due_ms comes), held back by flow control, or leased, so
// there is never a row without its fire or the reverse.
//
// # Transitions
//
// Every transition of a fire (arm, claim, ack, nack, down, kill, cancel,
// reap, replay) is one statement, most of them a PL/pgSQL function of
// schema/0001_queue.sql: one round trip and one transaction, atomic by
// itself, so a retried arm is an idempotent upsert and a claim whose reply
// was lost leaves leases that the reaper returns to armed when they expire.
// Fencing tokens come from a sequence and are never reused. Acks are
// group-committed (ack.go): those that arrive while a batch is in flight go
// out together in the next statement, so a burst costs a few commits (each
// an fsync), not one per fire.
//
// # Claims and flow control
//
// A claim never waits for a lock: it reads due fires in due order with FOR
// UPDATE SKIP LOCKED and locks their agents' rows in chronos_agents the same
// way, so claims in any number of processes take disjoint fires and never
// deadlock; a fire of an agent another claim holds stays queued for the
// next one. Under its agent's row lock, a claim counts the agent's leases in
// flight and leases no more than its room (relay.Flow): the rest are held
// (state 1) in the table, in due order, and go out as room frees, before
// any newer due fire (see relay.Flow for the rules).
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
//
// # Failures
//
// An error of the connection (refused, reset, a server shutting down or
// refusing connections, a deadline) wraps relay.ErrUnavailable, so NAS
// answers 503 store_unavailable; a statement the server refuses does not.
// The engine retries only an ack batch the server chose as a deadlock's
// victim; otherwise the callers retry (dispatchers retry their calls, an
// agent repeats a refused provision), and every transition is safe to
// repeat.
//
// # Lost data
//
// An engine writes an epoch marker into chronos_meta when it finds none and
// checks it at open, every Options.EpochCheck and on every CheckEpoch. A
// marker gone or replaced (tables emptied, a restore from elsewhere, a
// failover to a replica that had not received it) means armed fires written
// before may be gone: every engine of the schema reports the loss
// (relay.StoreEpoch) for Options.LostReportFor and logs it once.
package postgres
