package nas

// The operator routes: stop and start an instance, cancel every job of an
// agent, page and replay the dead letter (the unarmed view is in
// selfheal.go). AuthorizeOperator guards them all.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	known, err := s.instanceKnown(ctx, instanceID)
	if err != nil {
		return contract.InstanceStateResponse{}, fmt.Errorf("instance state: %w", err)
	}
	if !known {
		return contract.InstanceStateResponse{}, errUnknownInstance(instanceID)
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

// instanceKnown reports whether NAS knows instanceID: the agents file lists
// it, or the store remembers it (an agent armed a fire with it through NAS,
// or an operator stopped or started it).
func (s *Service) instanceKnown(ctx context.Context, instanceID string) (bool, error) {
	if src, ok := s.flow.source.(InstanceSource); ok && src.KnowsInstance(instanceID) {
		return true, nil
	}
	info, err := s.engine.Instance(ctx, instanceID)
	if err != nil {
		return false, err
	}
	return info.CallbackURL != "" || info.Stopped || !info.StoppedAt.IsZero() || !info.StartedAt.IsZero(), nil
}

// errUnknownInstance is the answer to an operator's call naming an instance
// NAS does not know.
func errUnknownInstance(instanceID string) *contract.Error {
	return contract.Errorf(http.StatusNotFound, contract.CodeNotFound,
		"NAS knows no instance %s: it is not in the agents file and no agent armed a fire with it", instanceID)
}

// errUnknownAgent is the answer to an operator's call naming an agent NAS
// does not know (see agentKnown).
func errUnknownAgent(agentID string) *contract.Error {
	return contract.Errorf(http.StatusNotFound, contract.CodeNotFound,
		"NAS knows no agent %s: it is not in the agents file and the store holds nothing of it", agentID)
}

// checkAgentKnown answers 404 for an agent NAS does not know; it reads the
// store (see agentKnown).
func (s *Service) checkAgentKnown(ctx context.Context, agentID string) error {
	fl, err := s.engine.AgentFlow(ctx, agentID)
	if err != nil {
		return err
	}
	known, err := s.agentKnown(ctx, agentID, fl)
	if err != nil {
		return err
	}
	if !known {
		return errUnknownAgent(agentID)
	}
	return nil
}

// CancelAgent cancels every job of an agent. An agent NAS knows nothing of
// is 404.
func (s *Service) CancelAgent(ctx context.Context, agentID string) (contract.CancelAllResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.CancelAllResponse{}, e
	}
	n, err := s.engine.CancelAgent(ctx, agentID)
	if err != nil {
		return contract.CancelAllResponse{}, fmt.Errorf("cancel agent: %w", err)
	}
	if n == 0 {
		// Nothing was armed: say so for an agent NAS knows, refuse an id
		// that names none (a typo must not read as done).
		if err := s.checkAgentKnown(ctx, agentID); err != nil {
			return contract.CancelAllResponse{}, s.operatorErr("cancel agent", err)
		}
	}
	s.invalidateCensus()
	s.log.InfoContext(ctx, "agent jobs cancelled", "agent_id", agentID, "cancelled", n)
	return contract.CancelAllResponse{AgentID: agentID, Cancelled: n}, nil
}

// operatorErr wraps err with what failed unless it is already an answer
// (a *contract.Error such as 404 for an unknown id).
func (s *Service) operatorErr(what string, err error) error {
	if ce := (*contract.Error)(nil); errors.As(err, &ce) {
		return ce
	}
	return s.engineErr(what, err)
}

// ListDead pages the dead letter, optionally of one agent (an agent NAS
// knows nothing of is 404).
func (s *Service) ListDead(ctx context.Context, agentID, cursor string, limit int) (contract.DLQListResponse, error) {
	if limit <= 0 || limit > contract.MaxListLimit {
		limit = contract.MaxListLimit
	}
	items, next, err := s.engine.ListDead(ctx, agentID, cursor, limit)
	if err != nil {
		return contract.DLQListResponse{}, s.engineErr("list dead letter", err)
	}
	if agentID != "" && cursor == "" && len(items) == 0 {
		if err := s.checkAgentKnown(ctx, agentID); err != nil {
			return contract.DLQListResponse{}, s.operatorErr("list dead letter", err)
		}
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
// agent's. Every entry it takes out of the dead letter is in the answer:
// re-armed (Entries), or dropped with the reason (an entry whose job was
// armed again since). A schedule id that names no dead letter is 404 and
// nothing is replayed; so is an agent NAS knows nothing of.
func (s *Service) Replay(ctx context.Context, req contract.DLQReplayRequest) (contract.DLQReplayResponse, error) {
	var res relay.ReplayResult
	var err error
	switch {
	case len(req.ScheduleIDs) > 0 && req.AgentID != "":
		return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "give schedule_ids or agent_id, not both")
	case len(req.ScheduleIDs) > 0:
		if len(req.ScheduleIDs) > 10000 {
			return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "at most 10000 schedule_ids at once")
		}
		for _, id := range req.ScheduleIDs {
			if e := checkPathID("schedule_ids[]", id); e != nil {
				return contract.DLQReplayResponse{}, e
			}
		}
		res, err = s.engine.Replay(ctx, req.ScheduleIDs)
		if unknown := (*relay.UnknownDeadLettersError)(nil); errors.As(err, &unknown) {
			return contract.DLQReplayResponse{}, errUnknownDeadLetters(unknown.ScheduleIDs)
		}
	case req.AgentID != "":
		if e := checkPathID("agent_id", req.AgentID); e != nil {
			return contract.DLQReplayResponse{}, e
		}
		res, err = s.engine.ReplayAgent(ctx, req.AgentID)
		if err == nil && len(res.Replayed)+len(res.Dropped) == 0 {
			if err := s.checkAgentKnown(ctx, req.AgentID); err != nil {
				return contract.DLQReplayResponse{}, s.operatorErr("replay", err)
			}
		}
	default:
		return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_ids or agent_id is required")
	}
	if err != nil {
		// Part of a replay may have happened: the dead letter says what is left.
		return contract.DLQReplayResponse{}, fmt.Errorf("replay: %w", err)
	}
	s.invalidateCensus()
	resp := contract.DLQReplayResponse{
		Replayed: len(res.Replayed),
		Entries:  make([]contract.DLQReplayEntry, 0, len(res.Replayed)),
		Dropped:  make([]contract.DLQDropped, 0, len(res.Dropped)),
		Missing:  append([]string{}, res.Missing...),
	}
	for _, d := range res.Replayed {
		resp.Entries = append(resp.Entries, contract.DLQReplayEntry{ScheduleID: d.ScheduleID, AgentID: d.AgentID, JobID: d.JobID, FireAt: contract.NewTime(d.FireAt)})
	}
	for _, d := range res.Dropped {
		desc := replayDropDescription(d.Reason)
		resp.Dropped = append(resp.Dropped, contract.DLQDropped{ScheduleID: d.ScheduleID, AgentID: d.AgentID, JobID: d.JobID,
			FireAt: contract.NewTime(d.FireAt), Reason: d.Reason, Description: desc})
		s.log.InfoContext(ctx, "dead letter dropped by a replay, not re-armed", "agent_id", d.AgentID, "job_id", d.JobID,
			"schedule_id", d.ScheduleID, "fire_at", contract.FormatTime(d.FireAt), "reason", d.Reason)
	}
	s.log.InfoContext(ctx, "dead letters replayed", "agent_id", req.AgentID, "replayed", len(res.Replayed),
		"dropped", len(res.Dropped), "missing", len(res.Missing))
	return resp, nil
}

// replayDropDescription says in words why a replay dropped an entry.
func replayDropDescription(reason string) string {
	switch reason {
	case relay.ReplayDropRearmed:
		return "the job was armed again after this fire died; the newer fire stands"
	}
	return reason
}

// errUnknownDeadLetters is the answer to a replay naming schedule ids no
// dead letter has (at most the first ten named).
func errUnknownDeadLetters(ids []string) *contract.Error {
	named := ids[:min(len(ids), 10)]
	more := ""
	if len(ids) > len(named) {
		more = fmt.Sprintf(" and %d more", len(ids)-len(named))
	}
	return contract.Errorf(http.StatusNotFound, contract.CodeNotFound,
		"no dead letter has schedule id %s%s: nothing was replayed", strings.Join(named, ", "), more)
}
