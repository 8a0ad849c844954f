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

// delivery is the first-delivery record of a delivery id.
func (k keys) delivery(id string) string { return k.tags[k.shardOf(id)] + ":dd:" + id }

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
