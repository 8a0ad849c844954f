package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.History = (*Engine)(nil)

// The history keys live under the control tag (one slot of a cluster):
// they are small, and a day of minutes is read in one pipeline.

// histMinute is the hash of one minute's counters (Unix minute): fields
// "o:<outcome>", "r" (retries) and "l:<bucket>" (lag buckets).
func (k keys) histMinute(minute int64) string {
	return k.control() + ":hm:" + strconv.FormatInt(minute, 10)
}

// histRecent is agent's list of recent deliveries, newest first (JSON).
func (k keys) histRecent(agent string) string { return k.control() + ":hr:" + agent }

// histLast is the hash of each agent's newest delivery (JSON).
func (k keys) histLast() string { return k.control() + ":hl" }

// histBeats is the hash of the processes' beats, id → JSON.
func (k keys) histBeats() string { return k.control() + ":hp" }

// AddHistory implements relay.History: one pipeline of HINCRBYs (each
// minute's hash expiring after relay.HistoryRetention) and LPUSHes.
func (e *deliveryHistory) AddHistory(ctx context.Context, minutes []relay.HistoryMinute, recent []relay.DeliveryRecord) error {
	if len(minutes) == 0 && len(recent) == 0 {
		return nil
	}
	encoded := make([]string, len(recent))
	last := map[string]string{}
	for i, r := range recent {
		b, err := json.Marshal(r)
		if err != nil {
			return fmt.Errorf("redis: add history: %w", err)
		}
		encoded[i] = string(b)
		last[r.AgentID] = encoded[i]
	}
	err := e.retry(ctx, func(ctx context.Context) error {
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, m := range minutes {
				key := e.k.histMinute(m.Minute.Unix() / 60)
				for o, n := range m.Outcomes {
					if n != 0 {
						p.HIncrBy(ctx, key, "o:"+o, n)
					}
				}
				if m.Retries != 0 {
					p.HIncrBy(ctx, key, "r", m.Retries)
				}
				for i, n := range m.Lag {
					if n != 0 {
						p.HIncrBy(ctx, key, "l:"+strconv.Itoa(i), n)
					}
				}
				p.Expire(ctx, key, relay.HistoryRetention)
			}
			byAgent := map[string][]any{}
			for i, r := range recent {
				byAgent[r.AgentID] = append(byAgent[r.AgentID], encoded[i])
			}
			for agent, items := range byAgent {
				key := e.k.histRecent(agent)
				p.LPush(ctx, key, items...)
				p.LTrim(ctx, key, 0, relay.HistoryRecent-1)
				p.Expire(ctx, key, relay.HistoryRetention)
			}
			if len(last) > 0 {
				p.HSet(ctx, e.k.histLast(), last)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("redis: add history: %w", err)
	}
	return nil
}

// HistoryMinutes implements relay.History: one HGETALL per minute of the
// range, in one pipeline.
func (e *deliveryHistory) HistoryMinutes(ctx context.Context, from, to time.Time) ([]relay.HistoryMinute, error) {
	first := (from.Unix() + 59) / 60 // the first minute starting at or after from
	end := (to.Unix() + 59) / 60
	if end-first > int64(relay.HistoryRetention/time.Minute) {
		first = end - int64(relay.HistoryRetention/time.Minute)
	}
	if end <= first {
		return nil, nil
	}
	cmds := make([]*goredis.MapStringStringCmd, end-first)
	err := e.retry(ctx, func(ctx context.Context) error {
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := range cmds {
				cmds[i] = p.HGetAll(ctx, e.k.histMinute(first+int64(i)))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis: history minutes: %w", err)
	}
	var out []relay.HistoryMinute
	for i, c := range cmds {
		fields := c.Val()
		if len(fields) == 0 {
			continue
		}
		m := relay.HistoryMinute{Minute: time.Unix((first+int64(i))*60, 0).UTC(), Outcomes: map[string]int64{},
			Lag: make([]int64, len(relay.HistoryLagBounds)+1)}
		for f, v := range fields {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch {
			case f == "r":
				m.Retries = n
			case strings.HasPrefix(f, "o:"):
				m.Outcomes[f[2:]] = n
			case strings.HasPrefix(f, "l:"):
				if b, err := strconv.Atoi(f[2:]); err == nil && b >= 0 && b < len(m.Lag) {
					m.Lag[b] = n
				}
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// RecentDeliveries implements relay.History.
func (e *deliveryHistory) RecentDeliveries(ctx context.Context, agentID string, max int) ([]relay.DeliveryRecord, error) {
	if max <= 0 || max > relay.HistoryRecent {
		max = relay.HistoryRecent
	}
	var items []string
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		items, err = e.c.LRange(ctx, e.k.histRecent(agentID), 0, int64(max-1)).Result()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis: recent deliveries: %w", err)
	}
	out := make([]relay.DeliveryRecord, 0, len(items))
	for _, s := range items {
		var r relay.DeliveryRecord
		if json.Unmarshal([]byte(s), &r) == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// LastDeliveries implements relay.History; records past the retention are
// removed as they are met.
func (e *deliveryHistory) LastDeliveries(ctx context.Context) (map[string]relay.DeliveryRecord, error) {
	var all map[string]string
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		all, err = e.c.HGetAll(ctx, e.k.histLast()).Result()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis: last deliveries: %w", err)
	}
	oldest := e.histNow().Add(-relay.HistoryRetention)
	out := make(map[string]relay.DeliveryRecord, len(all))
	var stale []string
	for agent, s := range all {
		var r relay.DeliveryRecord
		if json.Unmarshal([]byte(s), &r) != nil || r.At.Before(oldest) {
			stale = append(stale, agent)
			continue
		}
		out[agent] = r
	}
	if len(stale) > 0 {
		_ = e.c.HDel(ctx, e.k.histLast(), stale...).Err() // dropped again on the next read if this fails
	}
	return out, nil
}

// DueHistogram implements relay.History: a ZCOUNT of every shard's due
// zset per step, in one pipeline.
func (e *deliveryHistory) DueHistogram(ctx context.Context, from time.Time, step time.Duration, n int) ([]int64, error) {
	if step <= 0 || n <= 0 {
		return nil, fmt.Errorf("redis: due histogram: step %s and n %d must be positive", step, n)
	}
	cmds := make([]*goredis.IntCmd, n*e.k.shards)
	fromMs, stepMs := from.UnixMilli(), step.Milliseconds()
	err := e.retry(ctx, func(ctx context.Context) error {
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for s := range e.k.shards {
				for i := range n {
					// A fire due at ms X scores in (X-1, X] (see the
					// arm script): [lo, hi) of due times is (lo-1, hi-1]
					// of scores.
					lo := "(" + strconv.FormatInt(fromMs+int64(i)*stepMs-1, 10)
					hi := strconv.FormatInt(fromMs+int64(i+1)*stepMs-1, 10)
					cmds[s*n+i] = p.ZCount(ctx, e.k.due(s), lo, hi)
				}
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis: due histogram: %w", err)
	}
	out := make([]int64, n)
	for j, c := range cmds {
		out[j%n] += c.Val()
	}
	return out, nil
}

// Beat implements relay.History.
func (e *deliveryHistory) Beat(ctx context.Context, p relay.ProcessBeat) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("redis: beat: %w", err)
	}
	err = e.retry(ctx, func(ctx context.Context) error {
		return e.c.HSet(ctx, e.k.histBeats(), p.ID, string(b)).Err()
	})
	if err != nil {
		return fmt.Errorf("redis: beat: %w", err)
	}
	return nil
}

// Processes implements relay.History; beats older than since are removed.
func (e *deliveryHistory) Processes(ctx context.Context, since time.Time) ([]relay.ProcessBeat, error) {
	var all map[string]string
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		all, err = e.c.HGetAll(ctx, e.k.histBeats()).Result()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis: processes: %w", err)
	}
	out := make([]relay.ProcessBeat, 0, len(all))
	var stale []string
	for id, s := range all {
		var p relay.ProcessBeat
		if json.Unmarshal([]byte(s), &p) != nil || p.BeatAt.Before(since) {
			stale = append(stale, id)
			continue
		}
		out = append(out, p)
	}
	if len(stale) > 0 {
		_ = e.c.HDel(ctx, e.k.histBeats(), stale...).Err() // dropped again on the next read if this fails
	}
	relay.SortBeats(out)
	return out, nil
}

// histNow is the engine's clock: the injected one, else the local clock.
func (e *core) histNow() time.Time {
	if e.opts.Now != nil {
		return e.opts.Now()
	}
	return time.Now()
}
