package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/chronoscron/chronos/relay"
)

var errNotBuilt = errors.New("postgres: not built yet")

func (q *queue) Arm(ctx context.Context, req relay.ArmRequest) (relay.ArmResult, error) {
	return relay.ArmResult{}, errNotBuilt
}
func (q *queue) Cancel(ctx context.Context, agentID, jobID string) (bool, error) {
	return false, errNotBuilt
}
func (q *queue) Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error) {
	return relay.OneShot{}, errNotBuilt
}
func (q *queue) List(ctx context.Context, agentID, cursor string, limit int) ([]relay.OneShot, string, error) {
	return nil, "", errNotBuilt
}
func (q *queue) Claim(ctx context.Context, max int, leaseFor time.Duration, flow relay.Flow) ([]relay.Lease, error) {
	return nil, errNotBuilt
}
func (q *queue) NextDue(ctx context.Context) (time.Duration, bool, error) {
	return 0, false, errNotBuilt
}
func (q *queue) Extend(ctx context.Context, l relay.Lease, leaseFor time.Duration) (relay.Lease, error) {
	return relay.Lease{}, errNotBuilt
}
func (q *queue) Ack(ctx context.Context, l relay.Lease) error { return errNotBuilt }
func (q *queue) Nack(ctx context.Context, l relay.Lease, delay time.Duration, reason string) error {
	return errNotBuilt
}
func (q *queue) Down(ctx context.Context, l relay.Lease, delay, hold time.Duration, reason string) error {
	return errNotBuilt
}
func (q *queue) Kill(ctx context.Context, l relay.Lease, reason string) error { return errNotBuilt }
func (q *queue) Reap(ctx context.Context) (int, error)                        { return 0, errNotBuilt }
func (q *queue) CancelAgent(ctx context.Context, agentID string) (int, error) {
	return 0, errNotBuilt
}
func (q *queue) Stats(ctx context.Context) (relay.Stats, error) { return relay.Stats{}, errNotBuilt }

func (f *flows) SetAgentPolicy(ctx context.Context, agentID string, p relay.AgentPolicy) error {
	return errNotBuilt
}
func (f *flows) AgentFlow(ctx context.Context, agentID string) (relay.AgentFlow, error) {
	return relay.AgentFlow{}, errNotBuilt
}
func (f *flows) AgentFlows(ctx context.Context) ([]relay.AgentFlow, error) { return nil, errNotBuilt }
func (f *flows) AgentPhase(ctx context.Context, agentID string) (float64, error) {
	return 0, errNotBuilt
}
