package postgres

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/relay"
)

func (d *deadLetters) ListFailed(ctx context.Context, agentID string, keep time.Duration, max int) ([]relay.DeadLetter, error) {
	return nil, errNotBuilt
}
func (d *deadLetters) AckFailed(ctx context.Context, agentID string, keep time.Duration, scheduleIDs []string) (int, error) {
	return 0, errNotBuilt
}
func (d *deadLetters) ListDead(ctx context.Context, agentID, cursor string, limit int) ([]relay.DeadLetter, string, error) {
	return nil, "", errNotBuilt
}
func (d *deadLetters) Replay(ctx context.Context, scheduleIDs []string) (relay.ReplayResult, error) {
	return relay.ReplayResult{}, errNotBuilt
}
func (d *deadLetters) ReplayAgent(ctx context.Context, agentID string) (relay.ReplayResult, error) {
	return relay.ReplayResult{}, errNotBuilt
}

func (c *control) SetInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) error {
	return errNotBuilt
}
func (c *control) InstanceStopped(ctx context.Context, instanceID string) (bool, error) {
	return false, errNotBuilt
}
func (c *control) FirstDelivery(ctx context.Context, deliveryID string, ttl time.Duration) (bool, error) {
	return false, errNotBuilt
}
func (c *control) RaiseRekeyFloor(ctx context.Context, agentID string, at time.Time) (time.Time, error) {
	return time.Time{}, errNotBuilt
}
func (c *control) RekeyFloor(ctx context.Context, agentID string) (time.Time, error) {
	return time.Time{}, errNotBuilt
}

func (r *records) RecordLastFire(ctx context.Context, f relay.LastFire) error { return errNotBuilt }
func (r *records) ForgetLastFire(ctx context.Context, agentID, jobID string) error {
	return errNotBuilt
}
func (r *records) LastFiresOf(ctx context.Context, agentID string, expireBefore time.Time) ([]relay.LastFire, error) {
	return nil, errNotBuilt
}
func (r *records) Unarmed(ctx context.Context, q relay.UnarmedQuery) ([]relay.UnarmedFire, bool, error) {
	return nil, false, errNotBuilt
}
func (r *records) NoteInstance(ctx context.Context, instanceID string, state relay.InstanceState, at time.Time) error {
	return errNotBuilt
}
func (r *records) SetInstanceCallback(ctx context.Context, instanceID, callbackURL string) error {
	return errNotBuilt
}
func (r *records) Instance(ctx context.Context, instanceID string) (relay.InstanceInfo, error) {
	return relay.InstanceInfo{}, errNotBuilt
}
