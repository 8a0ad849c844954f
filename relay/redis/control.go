package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronoscron/chronos/relay"
)

// scriptSetStopped stops or starts an agent instance.
//
// KEYS[1] stopped set
// ARGV[1] now (unused), ARGV[2] instance id, ARGV[3] "1" stop | "0" start
//
// Returns 1.
var scriptSetStopped = script(`
if ARGV[3] == '1' then redis.call('SADD', KEYS[1], ARGV[2]) else redis.call('SREM', KEYS[1], ARGV[2]) end
return 1
`)

// SetInstanceState implements relay.Control. The state goes to every
// shard's copy of the stopped set (read by claims) first, then to the
// control set (read by InstanceStopped): once it returns, both agree. A
// failure part way is reported; calling it again completes the change.
func (e *fireRecords) SetInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) error {
	if err := state.Check(); err != nil {
		return fmt.Errorf("redis: set instance state: %w", err)
	}
	now, flag := e.nowArg(), stoppedFlag(state)
	_, err := e.runShards(ctx, scriptSetStopped,
		func(s int) []string { return []string{e.k.shardStopped(s)} },
		func(int) []any { return []any{now, instanceID, flag} })
	if err != nil {
		return fmt.Errorf("redis: set instance state: %w", err)
	}
	if _, err := e.run(ctx, scriptSetStopped, []string{e.k.stopped()}, now, instanceID, flag); err != nil {
		return fmt.Errorf("redis: set instance state: %w", err)
	}
	return nil
}

// copyStopped brings every shard's copy of the stopped set up to the
// control set, for data written before the copies existed: what the control
// set holds is added to each copy, and an instance started again meanwhile
// (gone from the control set when it is read a second time) is taken out
// again.
func (e *fireRecords) copyStopped(ctx context.Context) error {
	var ids []string
	read := func(ctx context.Context) error {
		var err error
		ids, err = e.c.SMembers(ctx, e.k.stopped()).Result()
		return err
	}
	if err := e.retry(ctx, read); err != nil {
		return fmt.Errorf("redis: copy stopped instances: %w", err)
	}
	if len(ids) == 0 {
		return nil
	}
	first := ids
	for s := range e.k.shards {
		members := make([]any, len(first))
		for i, id := range first {
			members[i] = id
		}
		if err := e.retry(ctx, func(ctx context.Context) error {
			return e.c.SAdd(ctx, e.k.shardStopped(s), members...).Err()
		}); err != nil {
			return fmt.Errorf("redis: copy stopped instances: %w", err)
		}
	}
	if err := e.retry(ctx, read); err != nil {
		return fmt.Errorf("redis: copy stopped instances: %w", err)
	}
	still := make(map[string]bool, len(ids))
	for _, id := range ids {
		still[id] = true
	}
	for _, id := range first {
		if still[id] {
			continue
		}
		for s := range e.k.shards {
			if err := e.retry(ctx, func(ctx context.Context) error {
				return e.c.SRem(ctx, e.k.shardStopped(s), id).Err()
			}); err != nil {
				return fmt.Errorf("redis: copy stopped instances: %w", err)
			}
		}
	}
	return nil
}

// stoppedFlag is a state as scriptSetStopped takes it.
func stoppedFlag(state relay.InstanceState) string {
	if state == relay.InstanceStopped {
		return "1"
	}
	return "0"
}

// InstanceStopped implements relay.Control.
func (e *fireRecords) InstanceStopped(ctx context.Context, instanceID string) (bool, error) {
	var stopped bool
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		stopped, err = e.c.SIsMember(ctx, e.k.stopped(), instanceID).Result()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("redis: instance stopped: %w", err)
	}
	return stopped, nil
}

// NoteInstance implements relay.Instances.
func (e *fireRecords) NoteInstance(ctx context.Context, instanceID string, state relay.InstanceState, at time.Time) error {
	if err := state.Check(); err != nil {
		return fmt.Errorf("redis: note instance: %w", err)
	}
	field := "started_at"
	if state == relay.InstanceStopped {
		field = "stopped_at"
	}
	err := e.retry(ctx, func(ctx context.Context) error {
		return e.c.HSet(ctx, e.k.instance(instanceID), field, at.UnixMilli()).Err()
	})
	if err != nil {
		return fmt.Errorf("redis: note instance: %w", err)
	}
	return nil
}

// SetInstanceCallback implements relay.Instances.
func (e *fireRecords) SetInstanceCallback(ctx context.Context, instanceID, callbackURL string) error {
	err := e.retry(ctx, func(ctx context.Context) error {
		return e.c.HSet(ctx, e.k.instance(instanceID), "callback", callbackURL).Err()
	})
	if err != nil {
		return fmt.Errorf("redis: set instance callback: %w", err)
	}
	return nil
}

// Instance implements relay.Instances: the instance's hash and its stopped
// flag in one pipeline.
func (e *fireRecords) Instance(ctx context.Context, instanceID string) (relay.InstanceInfo, error) {
	info := relay.InstanceInfo{InstanceID: instanceID}
	var fields map[string]string
	err := e.retry(ctx, func(ctx context.Context) error {
		var get *goredis.MapStringStringCmd
		var member *goredis.BoolCmd
		_, err := e.c.Pipelined(ctx, func(p goredis.Pipeliner) error {
			get = p.HGetAll(ctx, e.k.instance(instanceID))
			member = p.SIsMember(ctx, e.k.stopped(), instanceID)
			return nil
		})
		if err != nil {
			return err
		}
		fields, info.Stopped = get.Val(), member.Val()
		return nil
	})
	if err != nil {
		return relay.InstanceInfo{}, fmt.Errorf("redis: instance: %w", err)
	}
	at := func(name string) (time.Time, error) {
		v, ok := fields[name]
		if !ok {
			return time.Time{}, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("redis: instance %s: %s %q: %w", instanceID, name, v, errReply)
		}
		return ms(n), nil
	}
	if info.StoppedAt, err = at("stopped_at"); err != nil {
		return relay.InstanceInfo{}, err
	}
	if info.StartedAt, err = at("started_at"); err != nil {
		return relay.InstanceInfo{}, err
	}
	info.CallbackURL = fields["callback"]
	return info, nil
}
