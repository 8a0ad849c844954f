package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// scriptRaiseRekeyFloor moves an agent's rekey floor forward.
//
// KEYS[1] rekey floors
// ARGV[1] now (unused), ARGV[2] agent, ARGV[3] floor ms
//
// Returns the floor in force, ms.
var scriptRaiseRekeyFloor = script(`
local at = tonumber(ARGV[3])
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[2])) or 0
if at > cur then
  redis.call('HSET', KEYS[1], ARGV[2], at)
  return at
end
return cur
`)

// RaiseRekeyFloor implements relay.Control. The floor is kept in whole
// milliseconds, rounded up: a key minted in the same millisecond before it
// is retired too.
func (e *flowControl) RaiseRekeyFloor(ctx context.Context, agentID string, at time.Time) (time.Time, error) {
	if agentID == "" {
		return time.Time{}, errors.New("redis: raise rekey floor: empty agent id")
	}
	v, err := e.run(ctx, scriptRaiseRekeyFloor, []string{e.k.rekeyFloors()}, e.nowArg(), agentID, ceilMs(at))
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: raise rekey floor: %w", err)
	}
	n, err := integer(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: raise rekey floor: %w", err)
	}
	return ms(n), nil
}

// RekeyFloor implements relay.Control: one HGET.
func (e *flowControl) RekeyFloor(ctx context.Context, agentID string) (time.Time, error) {
	var raw string
	err := e.retry(ctx, func(ctx context.Context) error {
		var err error
		raw, err = e.c.HGet(ctx, e.k.rekeyFloors(), agentID).Result()
		if errors.Is(err, goredis.Nil) {
			raw, err = "", nil
		}
		return err
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: rekey floor: %w", err)
	}
	if raw == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("redis: rekey floor of %s: %w", agentID, errReply)
	}
	return ms(n), nil
}
