package nas

// The operator routes: stop and start an instance, cancel every job of an
// agent, page and replay the dead letter (the unarmed view is in
// selfheal.go). AuthorizeOperator guards them all.

import (
	"context"
	"fmt"
	"strings"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// checkPathID answers 400 for a path parameter that cannot be an id.
func checkPathID(name, v string) *contract.Error {
	if v == "" || len(v) > 256 || strings.ContainsAny(v, "/\x00") {
		return contract.BadRequest(contract.CodeInvalidRequest, "%s must be 1 to 256 characters", name)
	}
	return nil
}

// StopInstance stops an agent instance: its fires are dropped, not retried,
// until StartInstance.
func (s *Service) StopInstance(ctx context.Context, instanceID string) (contract.InstanceStateResponse, error) {
	return s.setInstanceState(ctx, instanceID, relay.InstanceStopped)
}

// StartInstance starts a stopped agent instance again and asks its agent to
// reconcile.
func (s *Service) StartInstance(ctx context.Context, instanceID string) (contract.InstanceStateResponse, error) {
	return s.setInstanceState(ctx, instanceID, relay.InstanceRunning)
}

func (s *Service) setInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) (contract.InstanceStateResponse, error) {
	if e := checkPathID("instance_id", instanceID); e != nil {
		return contract.InstanceStateResponse{}, e
	}
	stopped := state == relay.InstanceStopped
	at := s.now()
	if err := s.engine.SetInstanceState(ctx, instanceID, state); err != nil {
		return contract.InstanceStateResponse{}, fmt.Errorf("instance state: %w", err)
	}
	if err := s.engine.NoteInstance(ctx, instanceID, state, at); err != nil {
		return contract.InstanceStateResponse{}, fmt.Errorf("instance state: %w", err)
	}
	s.invalidateCensus()
	s.log.InfoContext(ctx, "instance state changed", "instance_id", instanceID, "stopped", stopped)
	if !stopped {
		// Its agent may sleep with jobs whose fires were dropped meanwhile:
		// ask it to reconcile now rather than at its next resync.
		s.nudge(ctx, instanceID, contract.ReconcileReasonInstanceStarted)
	}
	return contract.InstanceStateResponse{InstanceID: instanceID, Stopped: stopped}, nil
}

// CancelAgent cancels every job of an agent.
func (s *Service) CancelAgent(ctx context.Context, agentID string) (contract.CancelAllResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.CancelAllResponse{}, e
	}
	n, err := s.engine.CancelAgent(ctx, agentID)
	if err != nil {
		return contract.CancelAllResponse{}, fmt.Errorf("cancel agent: %w", err)
	}
	s.invalidateCensus()
	s.log.InfoContext(ctx, "agent jobs cancelled", "agent_id", agentID, "cancelled", n)
	return contract.CancelAllResponse{AgentID: agentID, Cancelled: n}, nil
}

// ListDead pages the dead letter, optionally of one agent.
func (s *Service) ListDead(ctx context.Context, agentID, cursor string, limit int) (contract.DLQListResponse, error) {
	if limit <= 0 || limit > contract.MaxListLimit {
		limit = contract.MaxListLimit
	}
	items, next, err := s.engine.ListDead(ctx, agentID, cursor, limit)
	if err != nil {
		return contract.DLQListResponse{}, s.engineErr("list dead letter", err)
	}
	resp := contract.DLQListResponse{Entries: make([]contract.DeadLetter, 0, len(items))}
	for _, d := range items {
		resp.Entries = append(resp.Entries, contract.DeadLetter{
			ScheduleID: d.ScheduleID, AgentID: d.AgentID, JobID: d.JobID, FireAt: contract.NewTime(d.FireAt),
			Attempts: d.Attempt, Reason: d.Reason, FailedAt: contract.NewTime(d.FailedAt),
		})
	}
	if next != "" {
		resp.NextCursor = &next
	}
	return resp, nil
}

// Replay re-arms dead-lettered fires: the listed schedule ids, or all of one
// agent's.
func (s *Service) Replay(ctx context.Context, req contract.DLQReplayRequest) (contract.DLQReplayResponse, error) {
	var n int
	var err error
	switch {
	case len(req.ScheduleIDs) > 0 && req.AgentID != "":
		return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "give schedule_ids or agent_id, not both")
	case len(req.ScheduleIDs) > 0:
		if len(req.ScheduleIDs) > 10000 {
			return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "at most 10000 schedule_ids at once")
		}
		n, err = s.engine.Replay(ctx, req.ScheduleIDs)
	case req.AgentID != "":
		n, err = s.engine.ReplayAgent(ctx, req.AgentID)
	default:
		return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_ids or agent_id is required")
	}
	if err != nil {
		return contract.DLQReplayResponse{}, fmt.Errorf("replay: %w", err)
	}
	s.invalidateCensus()
	s.log.InfoContext(ctx, "dead letters replayed", "agent_id", req.AgentID, "replayed", n)
	return contract.DLQReplayResponse{Replayed: n}, nil
}
