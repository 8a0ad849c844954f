// Package redis is the distributed relay engine: any number of NAS and relay
// processes share one Redis (a single node, Sentinel or Cluster) and together
// keep every armed one-shot.
//
// # Layout
//
// Keys are spread over a fixed number of shards; every key of a shard carries
// the hash tag {chronos:<prefix>:<shard>}, so a shard lives in one Cluster
// slot and every script touches one slot only. An agent's one-shots all live
// in the shard hash(agent_id) % shards:
//
//	{chronos:P:S}:a:<agent>   hash   job id → packed one-shot (armed row + attempt, token, due, last error, the agent's fire_at spelling, flexible window, a direct fire's sealed cron key)
//	{chronos:P:S}:due         zset   member(agent, job) → due time, ms (armed one-shots not held back)
//	{chronos:P:S}:lease       zset   member(agent, job) → lease expiry, ms (leased one-shots only)
//	{chronos:P:S}:ag:<agent>  hash   the agent's flow record: policy (par, rate, dis), parallelism applied (ep), Down hold (gate), rate slot (tat), probe (probe, fails), phase, fx flag
//	{chronos:P:S}:inf         hash   agent → its leases in flight (its members of lease, recounted from there by Reap)
//	{chronos:P:S}:hd:<agent>  zset   job id → due time, ms (the agent's due fires held back by flow control)
//	{chronos:P:S}:fx:<agent>  zset   job id → fire_at, ms (the agent's armed fires with a flexible window)
//	{chronos:P:S}:held        set    agents with held fires
//	{chronos:P:S}:ready       zset   agent → due time of its earliest held fire, ms (agents with held fires and room for them: claims lease those first)
//	{chronos:P:S}:gated       zset   agent → gate, ms (agents with held fires whose Down hold or rate slot has not passed)
//	{chronos:P:S}:probing     set    probing agents (a Down delivery, no ack since)
//	{chronos:P:S}:pol         set    agents with a policy of their own
//	{chronos:P:S}:tok         string last fencing token handed out in the shard
//	{chronos:P:S}:dead        hash   schedule id → packed dead letter
//	{chronos:P:S}:dz          zset   schedule id → failed at, ms (every dead letter)
//	{chronos:P:S}:da:<agent>  zset   schedule id → failed at, ms (one agent's dead letters)
//	{chronos:P:S}:ff:<agent>  zset   schedule id → failed at, ms (the agent's failed fires it has not acknowledged)
//	{chronos:P:S}:dd:<id>     string first-delivery record of a delivery id (shard of the id)
//	{chronos:P:S}:stopped     set    the shard's copy of the stopped agent instances (read by claims)
//	{chronos:P:ctl}:stopped   set    stopped agent instances
//	{chronos:P:ctl}:shards    string the shard count the data was written with
//	{chronos:P:ctl}:epoch     string the epoch marker (see Lost data below)
//	{chronos:P:ctl}:lost      string the report of a lost store, "<found at ms> <gone|replaced>", expiring with the report
//	{chronos:P:ctl}:phase     string the count of spreading phases handed out (AgentPhase)
//	{chronos:P:ctl}:rekey     hash   agent → its rekey floor, ms (cron keys minted before it are retired)
//
// A one-shot is in exactly one of due, lease and its agent's held fires; its
// row and its entry there are written together by one Lua script, so there
// is never a row without its fire or the reverse. Every state transition is one script, kept in the
// file of its family with the Go that calls it; each declares every key it
// touches in KEYS. Reads of one key (Get is one
// HGET, decoded in Go) and the first-delivery record (one SET NX GET with a
// nonce of the caller) are single commands, atomic by themselves. Where a transition needs keys
// it can only learn by reading (a claim touches the rows of the agents whose
// fires are due), a read-only step first finds the candidates and the
// transition then re-checks each one atomically.
//
// # Time
//
// Due times and lease expiries are judged by Redis's clock (TIME inside the
// scripts), never a worker's. Scores are milliseconds; a fire_at with a
// sub-millisecond fraction is rounded up, so it is never claimable early.
// The exact fire_at is kept (milliseconds plus the nanosecond remainder).
//
// # Flow control
//
// A claim holds back, in the store, the due fires of an agent without room
// (see relay.Flow and flow.go): they leave the due zset for the agent's held
// zset, keeping their due times. When room frees, the agent joins the
// shard's ready zset, and claims lease its held fires straight from its
// held zset, in due order, before any due entry: a held fire leaves it
// leased (or cancelled, or re-armed), never back to the due zset to be
// peeked and claimed again. Per-agent state lives in the
// agent's shard, so every script still touches one slot; the shard's held
// set, ready zset, gated zset, probing set and policy set name the agents
// that have any, so that a transition looks further only when some agent
// has any.
//
// # Wake-ups
//
// A transition that makes an entry due earlier than dispatchers may be
// waiting for (an arm or a nack that makes it the earliest of its shard, a
// replay, a reap, an agent with held fires made ready) publishes on the
// Pub/Sub channel chronos:<prefix>:wake in the same script; every engine of
// the prefix, in every process, subscribes and wakes its dispatchers, which
// then ask for the next due time. A dropped
// subscription reconnects by itself and wakes them once it is back, so an
// announcement lost meanwhile costs nothing; the dispatchers' periodic
// recheck is the last net.
//
// # Lost data
//
// An engine that opens a store without an epoch marker writes one (a random
// id) and remembers the marker it finds; it checks it every
// Options.EpochCheck and on every CheckEpoch. A marker gone since (Redis
// restarted without persistence, FLUSHALL, a failover to an empty replica)
// or replaced by another means the armed fires written before may be gone:
// the engine writes a new marker and a report of the loss that expires after
// Options.LostReportFor, and every engine of the prefix, in every process,
// reports the loss (relay.StoreEpoch) and logs it once as an error until
// then. A store that lost its data while no process had it open is not
// detectable: it looks like a new one.
//
// # Failures
//
// Every call retries a lost connection with backoff for Options.RetryFor,
// within its caller's deadline and relay.WithCallTimeout: the client honours
// context deadlines on the connection itself, so a Redis that stops
// answering fails a call at its deadline, with an error that wraps
// relay.ErrUnavailable.
// Acks and last fire records are group-committed (group.go): those that
// arrive while one batch is in flight go out together in the next, one
// script call per shard, all in one pipeline.
// Scripts are atomic, so a retry never half-applies a transition; a retried
// arm is an idempotent upsert, and a claim whose reply was lost leaves leases
// that the reaper returns to armed when they expire.
//
// # Files
//
// engine.go builds an engine and runs scripts; retry.go decides which errors
// a retry may fix; scripts.go holds the Lua prelude every script shares.
// Each family of transitions has one file, its scripts beside its Go:
//
//	arm.go       Arm, Cancel, CancelAgent
//	claim.go     Claim, NextDue, Extend, Reap (leases)
//	ack.go       Ack (group-committed), Nack (retry), Down (probe), Kill (dead-letter)
//	flow.go      SetAgentPolicy, AgentFlow, AgentFlows, AgentPhase (flow control)
//	dead.go      ListDead, Replay, ReplayAgent (the operator's dead letter)
//	failed.go    ListFailed, AckFailed (an agent's failed-fire feed)
//	lookup.go    Get, List, Stats
//	delivery.go  FirstDelivery, LookupDelivery (the relay route's checks)
//	control.go   SetInstanceState, InstanceStopped, NoteInstance, Instance
//	rekey.go     RaiseRekeyFloor, RekeyFloor (direct delivery's re-key)
//	lastfire.go  RecordLastFire, LastFiresOf, Unarmed
//	epoch.go     CheckEpoch (lost data)
//	wake.go      Wake (the Pub/Sub subscription)
//
// keys.go names every key, reply.go and msgpack.go decode replies and rows;
// msgpack.go also packs last fire records and leased rows as the scripts'
// cmsgpack does, so that scripts store records and compare rows as they
// come; group.go group-commits acks and records.
package redis
