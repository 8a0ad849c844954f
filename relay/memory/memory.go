package memory

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// ErrClosed is returned by every call made after Close.
var ErrClosed = errors.New("memory: engine closed")

// defaultListLimit is the page size of List and ListDead when limit <= 0.
const defaultListLimit = 100

// Options configure an Engine.
type Options struct {
	// Now is the engine's clock; leases, due times and ttls are judged by it
	// alone. Default time.Now.
	Now func() time.Time
}

// key names the armed row of one job of one agent.
type key struct{ agent, job string }

// entry is one one-shot: its armed row, due entry and lease in one record.
// An armed entry sits in the due heap, a leased one in the lease heap; never
// both.
type entry struct {
	shot  relay.OneShot
	dueMs int64  // shot.DueAt in milliseconds, rounded up
	seq   uint64 // arm order, breaks ties between equal due times and ties
	// tie is how many fires its agent armed before it due in the same
	// millisecond (at most maxTie): fires due together come up round the
	// agents, each agent's in arm order, as on Redis.
	tie     int
	token   int64 // fencing token of the current lease; 0 when armed
	untilMs int64 // lease expiry in milliseconds, when leased
	dueIdx  int   // index in the due heap or its agent's held heap, or -1
	leasIdx int   // index in the lease heap, or -1
	held    bool  // dueIdx is in its agent's held heap (flow control)
}

// Engine is the in-memory relay.Engine. It is safe for concurrent use.
//
// Its methods come from the parts it is made of, one per responsibility.
// Every part but history works on the one shared state (core) under its one
// lock; history keeps a lock of its own.
type Engine struct {
	*core            // the state, its lock, Close
	*queue           // armed rows, claims and leases: relay.Armed, relay.Queue (queue.go)
	*flows           // flow control: relay.Flows, Queue.Down (flow.go)
	*deadLetters     // relay.DeadLetters and the failed-fire feed (dead.go)
	*records         // last fires and instances: relay.LastFires, relay.Instances (lastfire.go)
	*control         // relay.Control and relay.Census (control.go, rekey.go, census.go)
	*deliveryHistory // relay.History (history.go)
}

var _ relay.Engine = (*Engine)(nil)

// core is the engine's state under mu, and the steps on it that its parts
// share.
type core struct {
	now  func() time.Time
	wake relay.Broadcast

	mu       sync.Mutex
	closed   bool
	seq      uint64 // arm and kill order
	tokens   int64  // last fencing token handed out; never reused
	rows     map[key]*entry
	byID     map[string]*entry // schedule id → entry
	jobs     map[string][]string
	due      dueHeap
	leases   leaseHeap
	dead     map[string]*deadEntry  // schedule id → dead letter
	deadList []*deadEntry           // ascending seq
	deadJobs map[key][]string       // schedule ids of dead letters per job
	failed   map[string][]failedRef // agent → its failed-fire feed, oldest first
	stopped  map[string]bool
	seen     map[string]int64 // delivery id → expiry (ms)
	seenExp  expiryHeap

	// lastFires holds each job's last fire outcome (agent → job → record)
	// and instances what is known of each instance; see lastfire.go.
	lastFires map[string]map[string]*lastFireRecord
	instances map[string]*relay.InstanceInfo

	// agents holds each agent's flow state (see flow.go), phases counts
	// the spreading phases handed out.
	agents map[string]*agentState
	phases uint64

	// rekey holds each re-keyed agent's rekey floor (see rekey.go).
	rekey map[string]time.Time

	// ties holds each agent's last due millisecond armed and how many of
	// its fires were armed due in it (see entry.tie).
	ties map[string]tieCount
}

// tieCount is an agent's count of fires armed due in one millisecond.
type tieCount struct {
	ms int64
	n  int
}

// maxTie caps entry.tie, as the Redis engine's due scores do.
const maxTie = 1022

// New returns an empty engine.
func New(opts Options) *Engine {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	c := &core{
		now:      now,
		rows:     make(map[key]*entry),
		byID:     make(map[string]*entry),
		jobs:     make(map[string][]string),
		dead:     make(map[string]*deadEntry),
		deadJobs: make(map[key][]string),
		failed:   make(map[string][]failedRef),
		stopped:  make(map[string]bool),
		seen:     make(map[string]int64),
		agents:   make(map[string]*agentState),
		ties:     make(map[string]tieCount),
	}
	return &Engine{
		core:            c,
		queue:           &queue{c},
		flows:           &flows{c},
		deadLetters:     &deadLetters{c},
		records:         &records{c},
		control:         &control{c},
		deliveryHistory: &deliveryHistory{now: now},
	}
}

// ceilMs returns t in Unix milliseconds, rounded up: a due time in whole
// milliseconds is then never earlier than t.
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// lock takes the mutex after checking ctx and that the engine is open.
func (c *core) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// signal wakes every waiting dispatcher.
func (c *core) signal() { c.wake.Notify() }

// Close implements relay.Engine: later calls fail with ErrClosed.
func (c *core) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// insert adds an armed entry to the row indexes and the due heap.
func (c *core) insert(ent *entry) {
	k := key{ent.shot.AgentID, ent.shot.JobID}
	c.rows[k] = ent
	c.byID[ent.shot.ScheduleID] = ent
	jobs := c.jobs[k.agent]
	i, _ := slices.BinarySearch(jobs, k.job)
	c.jobs[k.agent] = slices.Insert(jobs, i, k.job)
	c.due.push(ent)
	if ent.shot.Flex > 0 {
		c.agent(k.agent).flexAdd(ent)
	}
}

// remove deletes an entry from every index and heap.
func (c *core) remove(ent *entry) {
	k := key{ent.shot.AgentID, ent.shot.JobID}
	delete(c.rows, k)
	delete(c.byID, ent.shot.ScheduleID)
	jobs := c.jobs[k.agent]
	if i, ok := slices.BinarySearch(jobs, k.job); ok {
		jobs = slices.Delete(jobs, i, i+1)
	}
	if len(jobs) == 0 {
		delete(c.jobs, k.agent)
	} else {
		c.jobs[k.agent] = jobs
	}
	c.unqueue(ent)
	if ent.leasIdx >= 0 {
		c.leases.remove(ent)
		c.endLease(ent)
	}
	if ent.shot.Flex > 0 {
		if a := c.agents[k.agent]; a != nil {
			delete(a.flex, ent)
		}
	}
	ent.token = 0
}

// unqueue takes an armed entry off the due heap or its agent's held heap.
func (c *core) unqueue(ent *entry) {
	if ent.dueIdx < 0 {
		return
	}
	if ent.held {
		c.agents[ent.shot.AgentID].held.remove(ent)
		ent.held = false
		return
	}
	c.due.remove(ent)
}

// held returns the entry of l if l's fencing token is still current.
func (c *core) held(l relay.Lease) (*entry, error) {
	ent := c.byID[l.ScheduleID]
	if ent == nil || ent.leasIdx < 0 || ent.token != l.Token {
		return nil, relay.ErrLeaseLost
	}
	return ent, nil
}

// requeue returns a leased entry to armed, due after delay.
func (c *core) requeue(ent *entry, delay time.Duration, reason string) {
	c.leases.remove(ent)
	c.endLease(ent)
	ent.token = 0
	ent.shot.State = relay.StateArmed
	ent.shot.DueAt = c.now().Add(max(delay, 0))
	ent.shot.LastError = reason
	ent.dueMs = ceilMs(ent.shot.DueAt)
	c.due.push(ent)
	c.signal()
}
