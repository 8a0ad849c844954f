package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.StoreEpoch = (*Engine)(nil)

// Defaults of the lost-data check.
const (
	// DefaultLostReportFor is how long a lost store is reported: the
	// default resync interval of agents, by the end of which every awake
	// agent has armed its jobs again.
	DefaultLostReportFor = 5 * time.Minute
	// DefaultEpochCheck is how often an engine checks the epoch marker by
	// itself.
	DefaultEpochCheck = 15 * time.Second
)

// Reasons of a lost store, as EpochStatus.Reason gives them.
const (
	ReasonMarkerGone     = "the store's epoch marker was gone: Redis restarted without persistence, was flushed, or failed over to a replica without the data"
	ReasonMarkerReplaced = "the store's epoch marker was replaced: another process found it gone first, or the data was restored from elsewhere"
	ReasonShardLost      = "a shard's copy of the epoch marker was gone, replaced or behind: its master restarted without persistence, or failed over to a replica that missed writes"
)

// scriptShardEpoch checks one shard's copy of the epoch marker.
//
// KEYS[1] the shard's marker copy
// ARGV[1] the marker in force, ARGV[2] the marker the caller knew before
// ("" = none yet), ARGV[3] the sequence number the caller last saw (0 =
// none), ARGV[4] "1" to raise the sequence number
//
// Returns {lost (1 | 0), sequence number}. A copy missing or unlike both
// markers is lost when the caller knew a marker; one behind what the
// caller saw is lost. Either way the copy is set to the marker in force.
var scriptShardEpoch = script(`
local f = redis.call('HMGET', KEYS[1], 'm', 'seq')
local m, seq = f[1], tonumber(f[2]) or 0
local lost = 0
if not m then
  if ARGV[2] ~= '' then lost = 1 end
elseif m ~= ARGV[1] and m ~= ARGV[2] and ARGV[2] ~= '' then
  lost = 1
elseif seq < tonumber(ARGV[3]) then
  lost = 1
end
if ARGV[4] == '1' or lost == 1 or m ~= ARGV[1] then
  seq = seq + 1
  redis.call('HSET', KEYS[1], 'm', ARGV[1], 'seq', seq)
end
return {lost, seq}
`)

// scriptEpoch checks the epoch marker: one missing is written (and, when the
// caller knew another, the loss reported); one replaced is reported as a
// loss unless one is already reported.
//
// KEYS[1] epoch marker, KEYS[2] lost report, KEYS[3] shard count
// ARGV[1] now, ARGV[2] the marker the caller knows ("" = none yet),
// ARGV[3] a fresh marker, ARGV[4] how long a loss is reported (ms),
// ARGV[5] the shard count, ARGV[6] "shard" when the caller found a shard's
// copy lost (reported unless a loss is already), else ""
//
// Returns {marker in force, now ms} or, while a loss is reported,
// {marker in force, now ms, report, report ms left}.
var scriptEpoch = script(`
local now = clock(ARGV[1])
local known = ARGV[2]
local cur = redis.call('GET', KEYS[1])
if not cur then
  cur = ARGV[3]
  redis.call('SET', KEYS[1], cur)
  redis.call('SET', KEYS[3], ARGV[5], 'NX')
  if known ~= '' then
    redis.call('SET', KEYS[2], now .. ' gone', 'PX', tonumber(ARGV[4]))
  end
elseif known ~= '' and cur ~= known then
  redis.call('SET', KEYS[2], now .. ' replaced', 'NX', 'PX', tonumber(ARGV[4]))
end
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[2], now .. ' ' .. ARGV[6], 'NX', 'PX', tonumber(ARGV[4]))
end
local lost = redis.call('GET', KEYS[2])
if not lost then return {cur, now} end
return {cur, now, lost, redis.call('PTTL', KEYS[2])}
`)

// CheckEpoch implements relay.StoreEpoch. The first check of an engine
// adopts the store's marker (writing one into an empty store); a later one
// that finds it gone or replaced reports the loss to every engine of the
// prefix for Options.LostReportFor. The first check that sees a report logs
// it as an error, and the first after it ends says so.
//
// Each shard keeps a copy of the marker with a sequence number that the
// background check raises: a copy gone, replaced or behind what this
// engine saw (a master restarted empty, or a promoted replica that missed
// writes) is reported as a loss, with ReasonShardLost.
func (e *storeChecks) CheckEpoch(ctx context.Context) (relay.EpochStatus, error) {
	return e.checkEpoch(ctx, false)
}

// checkEpoch is CheckEpoch; bump raises the shards' sequence numbers.
func (e *storeChecks) checkEpoch(ctx context.Context, bump bool) (relay.EpochStatus, error) {
	// One check at a time adopts the marker; a caller waits for another's
	// check no longer than its context allows.
	select {
	case e.epochSem <- struct{}{}:
		defer func() { <-e.epochSem }()
	case <-ctx.Done():
		return relay.EpochStatus{}, fmt.Errorf("redis: check epoch: %w", unavailable(ctx, ctx.Err()))
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	fresh := "ep_" + hex.EncodeToString(b[:])
	e.bumpEpoch = bump
	v, err := e.run(ctx, scriptEpoch, []string{e.k.epoch(), e.k.lost(), e.k.shardCount()},
		e.nowArg(), e.epoch, fresh, durMs(e.opts.LostReportFor), e.opts.Shards, "")
	if err != nil {
		return relay.EpochStatus{}, fmt.Errorf("redis: check epoch: %w", err)
	}
	st, marker, err := decodeEpoch(v)
	if err != nil {
		return relay.EpochStatus{}, fmt.Errorf("redis: check epoch: %w", err)
	}
	if lost := e.checkShardEpochs(ctx, marker); lost != "" && !st.Lost {
		v, err = e.run(ctx, scriptEpoch, []string{e.k.epoch(), e.k.lost(), e.k.shardCount()},
			e.nowArg(), marker, fresh, durMs(e.opts.LostReportFor), e.opts.Shards, "shard")
		if err == nil {
			st, marker, err = decodeEpoch(v)
		}
		if err != nil {
			return relay.EpochStatus{}, fmt.Errorf("redis: check epoch: report %s: %w", lost, err)
		}
	}
	e.epoch = marker
	switch {
	case st.Lost && !st.Since.Equal(e.reported):
		e.reported = st.Since
		e.log.ErrorContext(ctx, "relay store lost its data: armed fires may be gone; agents arm theirs again when they next reconcile",
			"prefix", e.opts.Prefix, "reason", st.Reason, "since", st.Since, "reported_until", st.Until)
	case !st.Lost && !e.reported.IsZero():
		e.reported = time.Time{}
		e.log.InfoContext(ctx, "relay store loss no longer reported", "prefix", e.opts.Prefix)
	}
	return st, nil
}

// checkShardEpochs checks every shard's copy of the epoch marker (one
// pipelined call, a round trip per master) and returns "" or which shards
// lost writes ("shards 3, 7"). A shard whose master does not answer is
// left for a later check. Only the background check raises the shards'
// sequence numbers, a write every Options.EpochCheck: a readiness probe
// only reads them.
func (e *storeChecks) checkShardEpochs(ctx context.Context, marker string) string {
	bump := "0"
	if e.bumpEpoch {
		bump = "1"
	}
	if e.shardSeq == nil {
		e.shardSeq = make([]int64, e.k.shards)
	}
	out, errs, err := e.peekShards(ctx, scriptShardEpoch,
		func(s int) []string { return []string{e.k.shardEpoch(s)} },
		func(s int) []any { return []any{marker, e.epoch, e.shardSeq[s], bump} })
	if err != nil {
		e.log.DebugContext(ctx, "relay store shard epochs not checked", "err", err)
		return ""
	}
	var lost []string
	for s := range e.k.shards {
		if errs[s] != nil {
			continue
		}
		a, err := array(out[s])
		if err != nil || len(a) != 2 {
			continue
		}
		l, _ := integer(a[0])
		seq, _ := integer(a[1])
		e.shardSeq[s] = seq
		if l == 1 {
			lost = append(lost, strconv.Itoa(s))
		}
	}
	if len(lost) == 0 {
		return ""
	}
	return "shards " + strings.Join(lost, ", ")
}

// decodeEpoch reads scriptEpoch's reply.
func decodeEpoch(v any) (relay.EpochStatus, string, error) {
	a, err := array(v)
	if err != nil || (len(a) != 2 && len(a) != 4) {
		return relay.EpochStatus{}, "", errReply
	}
	marker, err := str(a[0])
	if err != nil {
		return relay.EpochStatus{}, "", err
	}
	if len(a) == 2 {
		return relay.EpochStatus{}, marker, nil
	}
	now, err1 := integer(a[1])
	report, err2 := str(a[2])
	left, err3 := integer(a[3])
	at, kind, ok := strings.Cut(report, " ")
	since, err4 := strconv.ParseInt(at, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || !ok {
		return relay.EpochStatus{}, "", fmt.Errorf("%w: lost report %q", errReply, report)
	}
	reason := ReasonMarkerGone
	switch kind {
	case "replaced":
		reason = ReasonMarkerReplaced
	case "shard":
		reason = ReasonShardLost
	}
	return relay.EpochStatus{Lost: true, Since: ms(since), Until: ms(now + max(left, 0)), Reason: reason}, marker, nil
}

// watchEpoch checks the epoch marker every Options.EpochCheck until the
// engine closes, so that a lost store is logged even when nobody asks.
func (e *storeChecks) watchEpoch() {
	defer e.wg.Done()
	t := time.NewTicker(e.opts.EpochCheck)
	defer t.Stop()
	for {
		select {
		case <-e.closed:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), min(e.opts.EpochCheck, 5*time.Second))
			if _, err := e.checkEpoch(ctx, true); err != nil {
				e.log.Debug("relay store epoch not checked", "err", err)
			}
			cancel()
		}
	}
}
