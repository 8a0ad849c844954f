package redis

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.Census = (*Engine)(nil)

// censusScanCount is the COUNT hint of the census's SCAN calls.
const censusScanCount = 1000

// ArmedByAgent implements relay.Census: it scans each shard's row hashes
// (on every master of a cluster) and counts their fields.
func (e *storeChecks) ArmedByAgent(ctx context.Context, max int) ([]relay.AgentArmed, bool, error) {
	max = relay.CensusMax(max)
	keys := make(map[string]string) // row key → agent id
	for s := range e.k.shards {
		base := e.k.rows(s, "")
		var found []string
		err := e.retry(ctx, func(ctx context.Context) error {
			var err error
			found, err = e.scanKeys(ctx, globEscape(base)+"*")
			return err
		})
		if err != nil {
			return nil, false, fmt.Errorf("redis: armed by agent: %w", err)
		}
		for _, k := range found {
			keys[k] = strings.TrimPrefix(k, base)
		}
	}
	ids := make([]string, 0, len(keys))
	byAgent := make(map[string]string, len(keys))
	for k, agent := range keys {
		ids = append(ids, agent)
		byAgent[agent] = k
	}
	slices.Sort(ids)
	more := len(ids) > max
	if more {
		ids = ids[:max]
	}
	cmds := make([]*goredis.IntCmd, len(ids))
	err := e.retry(ctx, func(ctx context.Context) error {
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = p.HLen(ctx, byAgent[id])
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("redis: armed by agent: %w", err)
	}
	out := make([]relay.AgentArmed, 0, len(ids))
	for i, id := range ids {
		// A hash emptied since the scan is gone: its agent holds nothing.
		if n := cmds[i].Val(); n > 0 {
			out = append(out, relay.AgentArmed{AgentID: id, Armed: n})
		}
	}
	return out, more, nil
}

// StoppedInstances implements relay.Census.
func (e *storeChecks) StoppedInstances(ctx context.Context, max int) ([]string, bool, error) {
	var ids []string
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		ids, err = e.c.SMembers(ctx, e.k.stopped()).Result()
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("redis: stopped instances: %w", err)
	}
	slices.Sort(ids)
	max = relay.CensusMax(max)
	if len(ids) > max {
		return ids[:max], true, nil
	}
	return ids, false, nil
}

// scanKeys returns the keys matching pattern, from every master of a
// cluster or from the one server.
func (e *storeChecks) scanKeys(ctx context.Context, pattern string) ([]string, error) {
	scan := func(ctx context.Context, c goredis.Cmdable) ([]string, error) {
		var out []string
		it := c.Scan(ctx, 0, pattern, censusScanCount).Iterator()
		for it.Next(ctx) {
			out = append(out, it.Val())
		}
		return out, it.Err()
	}
	cc, ok := e.c.(*goredis.ClusterClient)
	if !ok {
		return scan(ctx, e.c)
	}
	var mu sync.Mutex
	var all []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		found, err := scan(ctx, c)
		mu.Lock()
		all = append(all, found...)
		mu.Unlock()
		return err
	})
	return all, err
}

// globEscape escapes the glob characters of a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
