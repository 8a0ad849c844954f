package redis

import (
	"hash/fnv"
	"strconv"
)

// keys builds every Redis key and channel name of one engine. All keys carry
// a hash tag, {chronos:<prefix>:<shard>} or {chronos:<prefix>:ctl}.
type keys struct {
	prefix string
	shards int
	tags   []string // tags[s] is the hash-tagged base of shard s
}

func newKeys(prefix string, shards int) keys {
	k := keys{prefix: prefix, shards: shards, tags: make([]string, shards)}
	for s := range shards {
		k.tags[s] = "{chronos:" + prefix + ":" + strconv.Itoa(s) + "}"
	}
	return k
}

// shardOf is the shard of an agent (or of any id): FNV-1a modulo shards.
func (k keys) shardOf(id string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(k.shards))
}

// rows is the hash of agent's one-shots, job id → packed one-shot.
func (k keys) rows(shard int, agent string) string { return k.tags[shard] + ":a:" + agent }

// due is the shard's zset of armed one-shots by due time (ms).
func (k keys) due(shard int) string { return k.tags[shard] + ":due" }

// lease is the shard's zset of leased one-shots by lease expiry (ms).
func (k keys) lease(shard int) string { return k.tags[shard] + ":lease" }

// token is the shard's fencing token counter.
func (k keys) token(shard int) string { return k.tags[shard] + ":tok" }

// dead is the shard's hash of dead letters, schedule id → packed dead letter.
func (k keys) dead(shard int) string { return k.tags[shard] + ":dead" }

// deadByTime is the shard's zset of dead letters by failure time (ms).
func (k keys) deadByTime(shard int) string { return k.tags[shard] + ":dz" }

// deadOfAgent is the zset of agent's dead letters by failure time (ms).
func (k keys) deadOfAgent(shard int, agent string) string { return k.tags[shard] + ":da:" + agent }

// failed is agent's failed-fire feed: a zset of the schedule ids of its dead
// letters it has not acknowledged, by failure time (ms).
func (k keys) failed(shard int, agent string) string { return k.tags[shard] + ":ff:" + agent }

// failedList is where earlier versions kept agent's failed-fire feed, as a
// list of schedule ids; ListFailed moves what it finds there into failed.
func (k keys) failedList(shard int, agent string) string { return k.tags[shard] + ":f:" + agent }

// deliveryOf is the first-delivery record of a delivery id of a fire of
// shard: LookupDelivery keeps it with the fire's own keys, so that the
// relay route of a fire depends on its shard's master alone (a record on
// another master could be lost in that master's failover, and the fire
// delivered again).
func (k keys) deliveryOf(shard int, id string) string { return k.tags[shard] + ":dd:" + id }

// control is the hash-tagged base of engine-wide keys.
func (k keys) control() string { return "{chronos:" + k.prefix + ":ctl}" }

// stopped is the set of stopped agent instances.
func (k keys) stopped() string { return k.control() + ":stopped" }

// shardStopped is the shard's copy of the set of stopped agent instances,
// which the claim reads so that a lease says whether its instance is
// stopped (a script touches one slot only, and the control set lives in
// another).
func (k keys) shardStopped(shard int) string { return k.tags[shard] + ":stopped" }

// shardCount records the shard count the data was written with.
func (k keys) shardCount() string { return k.control() + ":shards" }

// epoch is the store's epoch marker: written when an engine first finds the
// store empty; its disappearance means the data is gone.
func (k keys) epoch() string { return k.control() + ":epoch" }

// shardEpoch is shard's copy of the epoch marker, a hash of the marker
// ("m") and a sequence number ("seq") every background check raises: a
// master whose copy is gone, another or behind what an engine saw lost
// writes (see CheckEpoch).
func (k keys) shardEpoch(shard int) string { return k.tags[shard] + ":epoch" }

// lost is the report of a lost store ("<found at ms> <gone|replaced>"),
// expiring when the report ends.
func (k keys) lost() string { return k.control() + ":lost" }

// wake is the Pub/Sub channel that announces a new earliest due entry.
func (k keys) wake() string { return "chronos:" + k.prefix + ":wake" }

// member is the due/lease zset member of (agent, job): the agent id's length,
// a colon, the agent id and the job id, so it splits back unambiguously.
func member(agent, job string) string {
	return strconv.Itoa(len(agent)) + ":" + agent + job
}

// lastFires is the hash of agent's last fire records, job id → packed record.
func (k keys) lastFires(shard int, agent string) string { return k.tags[shard] + ":lf:" + agent }

// lastFireIndex is the shard's zset of last fire records by outcome time
// (ms), members as in member.
func (k keys) lastFireIndex(shard int) string { return k.tags[shard] + ":lfz" }

// instance is the hash of what is known of one agent instance: stopped_at,
// started_at (ms) and callback.
func (k keys) instance(id string) string { return k.control() + ":inst:" + id }

// agent is the hash of agent's flow record: its policy (par, rate, dis),
// the parallelism the last claim that left it held fires applied (ep), its Down hold and rate slot
// (gate, tat, ms), its probe (probe, fails), its spreading phase (phase)
// and whether it may have fires with a flexible window (fx).
func (k keys) agent(shard int, agent string) string { return k.tags[shard] + ":ag:" + agent }

// inFlight is the shard's hash of agents' leases in flight, agent → count.
// Every script that takes or ends a lease keeps it in step with the lease
// zset, and Reap recounts it from there now and then (see flow.go).
func (k keys) inFlight(shard int) string { return k.tags[shard] + ":inf" }

// legacyInFlight is where an earlier release kept one agent's leases (a
// zset, job id → lease expiry): removed with the agent's fires.
func (k keys) legacyInFlight(shard int, agent string) string { return k.tags[shard] + ":fl:" + agent }

// heldOf is the zset of agent's due fires held back by flow control, job
// id → due time (ms).
func (k keys) heldOf(shard int, agent string) string { return k.tags[shard] + ":hd:" + agent }

// flexOf is the zset of agent's armed fires with a flexible window, job id
// → fire_at (ms).
func (k keys) flexOf(shard int, agent string) string { return k.tags[shard] + ":fx:" + agent }

// held is the shard's set of agents with held fires.
func (k keys) held(shard int) string { return k.tags[shard] + ":held" }

// gated is the shard's zset of agents with held fires whose gate (a Down
// hold or their rate's next slot) has not passed, by that time (ms).
func (k keys) gated(shard int) string { return k.tags[shard] + ":gated" }

// ready is the shard's zset of agents whose held fires may go out (they
// have room and their gate passed), by the due time of their earliest held
// fire (ms): claims lease those fires straight from the agents' held zsets.
func (k keys) ready(shard int) string { return k.tags[shard] + ":ready" }

// probing is the shard's set of probing agents.
func (k keys) probing(shard int) string { return k.tags[shard] + ":probing" }

// policies is the shard's set of agents with a policy of their own.
func (k keys) policies(shard int) string { return k.tags[shard] + ":pol" }

// phase is the counter of the spreading phases handed out.
func (k keys) phase() string { return k.control() + ":phase" }

// rekeyFloors is the hash of agent → rekey floor, ms (relay.Control's
// RaiseRekeyFloor).
func (k keys) rekeyFloors() string { return k.control() + ":rekey" }

// ties is the shard's hash of each agent's last due millisecond armed and
// how many of its fires were armed due in it before: "ms:k" (see
// scriptArm).
func (k keys) ties(shard int) string { return k.tags[shard] + ":tie" }

// flowKeys are the keys release needs of one agent, in the order the
// scripts take them: its flow record, the shard's in-flight counts and the
// agent's held fires.
func (k keys) flowKeys(shard int, agent string) [3]string {
	return [3]string{k.agent(shard, agent), k.inFlight(shard), k.heldOf(shard, agent)}
}
