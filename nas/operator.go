package nas

// The operator routes: stop and start an instance, cancel every job of an
// agent, page and replay the dead letter (the unarmed view is in
// selfheal.go). OperatorAuth guards them all.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// Operator is the operator's actions. It is safe for concurrent use.
type Operator struct {
	*core
	flow   *Flow
	heal   *SelfHeal
	census *censusCache
}

// checkPathID answers 400 for a path parameter that cannot be an id.
func checkPathID(name, v string) *contract.Error {
	if v == "" || len(v) > 256 || strings.ContainsAny(v, "/\x00") {
		return contract.BadRequest(contract.CodeInvalidRequest, "%s must be 1 to 256 characters", name)
	}
	return nil
}

// StopInstance stops an agent instance: its fires are dropped, not retried,
// until StartInstance.
func (s *Operator) StopInstance(ctx context.Context, instanceID string) (contract.InstanceStateResponse, error) {
	return s.setInstanceState(ctx, instanceID, relay.InstanceStopped)
}

// StartInstance starts a stopped agent instance again and asks its agent to
// reconcile.
func (s *Operator) StartInstance(ctx context.Context, instanceID string) (contract.InstanceStateResponse, error) {
	return s.setInstanceState(ctx, instanceID, relay.InstanceRunning)
}

func (s *Operator) setInstanceState(ctx context.Context, instanceID string, state relay.InstanceState) (contract.InstanceStateResponse, error) {
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
	s.census.invalidate()
	s.log.InfoContext(ctx, "instance state changed", "instance_id", instanceID, "stopped", stopped)
	if !stopped {
		// Its agent may sleep with jobs whose fires were dropped meanwhile:
		// ask it to reconcile now rather than at its next resync.
		s.heal.nudge(ctx, instanceID, contract.ReconcileReasonInstanceStarted)
	}
	return contract.InstanceStateResponse{InstanceID: instanceID, Stopped: stopped}, nil
}

// instanceKnown reports whether NAS knows instanceID: the agents file lists
// it, or the store remembers it (an agent armed a fire with it through NAS,
// or an operator stopped or started it).
func (s *Operator) instanceKnown(ctx context.Context, instanceID string) (bool, error) {
	if src, ok := s.source.(InstanceSource); ok && src.KnowsInstance(instanceID) {
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

// CancelAgent cancels every job of an agent. An agent NAS knows nothing of
// is 404.
func (s *Operator) CancelAgent(ctx context.Context, agentID string) (contract.CancelAllResponse, error) {
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
	s.census.invalidate()
	s.log.InfoContext(ctx, "agent jobs cancelled", "agent_id", agentID, "cancelled", n)
	return contract.CancelAllResponse{AgentID: agentID, Cancelled: n}, nil
}

// ListDead pages the dead letter, optionally of one agent (an agent NAS
// knows nothing of is 404).
func (s *Operator) ListDead(ctx context.Context, agentID, cursor string, limit int) (contract.DLQListResponse, error) {
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
func (s *Operator) Replay(ctx context.Context, req contract.DLQReplayRequest) (contract.DLQReplayResponse, error) {
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
	s.census.invalidate()
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

// DisableAgent is the kill switch: every fire of agentID is held in the
// store (none is delivered, none is lost) and its API calls are refused
// with 403 invalid_client, in every NAS process within
// AgentsRefreshInterval, until EnableAgent. An agent NAS knows nothing of
// is 404 and nothing changes.
func (s *Operator) DisableAgent(ctx context.Context, agentID string) (contract.AgentStateResponse, error) {
	return s.setAgentDisabled(ctx, agentID, true)
}

// EnableAgent ends DisableAgent: the agent's held fires go out (those more
// than relay.misfire_grace late are dead-lettered, and so reported to the
// agent as failed fires) and its calls are served again. An agent the
// agents file disables cannot be enabled here: 409 conflict.
func (s *Operator) EnableAgent(ctx context.Context, agentID string) (contract.AgentStateResponse, error) {
	return s.setAgentDisabled(ctx, agentID, false)
}

func (s *Operator) setAgentDisabled(ctx context.Context, agentID string, disabled bool) (contract.AgentStateResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.AgentStateResponse{}, e
	}
	if !disabled && s.flow.fileDisabled(agentID) {
		return contract.AgentStateResponse{}, contract.Errorf(http.StatusConflict, contract.CodeConflict,
			"the agents file disables agent %s (disabled: true); remove that from its entry to enable it", agentID)
	}
	fl, err := s.engine.AgentFlow(ctx, agentID)
	if err != nil {
		return contract.AgentStateResponse{}, fmt.Errorf("agent state: %w", err)
	}
	known, err := s.agentKnown(ctx, agentID, fl)
	if err != nil {
		return contract.AgentStateResponse{}, fmt.Errorf("agent state: %w", err)
	}
	if !known {
		return contract.AgentStateResponse{}, errUnknownAgent(agentID)
	}
	p := fl.Policy
	changed := p.Disabled != disabled
	if changed {
		p.Disabled = disabled
		if err := s.engine.SetAgentPolicy(ctx, agentID, p); err != nil {
			return contract.AgentStateResponse{}, fmt.Errorf("agent state: %w", err)
		}
	}
	s.flow.noteDisabled(agentID, disabled)
	s.census.invalidate()
	s.log.InfoContext(ctx, "agent state changed", "agent_id", agentID, "disabled", disabled)
	if changed && !disabled {
		s.heal.nudgeAgent(ctx, agentID, contract.ReconcileReasonAgentEnabled)
	}
	return contract.AgentStateResponse{AgentID: agentID, Disabled: disabled}, nil
}

// RekeyAgent retires every cron key of agentID's direct jobs: it raises the
// agent's rekey floor in the store to now, so that the next provision of
// each job mints a new key (in every NAS process at once), and asks the
// agent's instances to reconcile (reason contract.ReconcileReasonRekey),
// which provisions them. A fire armed under an old key keeps it until its
// job is provisioned again, so no fire is lost. An agent NAS knows nothing
// of is 404 and nothing changes, as for DisableAgent.
func (s *Operator) RekeyAgent(ctx context.Context, agentID string) (contract.AgentRekeyResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.AgentRekeyResponse{}, e
	}
	fl, err := s.engine.AgentFlow(ctx, agentID)
	if err != nil {
		return contract.AgentRekeyResponse{}, fmt.Errorf("rekey: %w", err)
	}
	known, err := s.agentKnown(ctx, agentID, fl)
	if err != nil {
		return contract.AgentRekeyResponse{}, fmt.Errorf("rekey: %w", err)
	}
	if !known {
		return contract.AgentRekeyResponse{}, errUnknownAgent(agentID)
	}
	// Every key minted up to this millisecond is retired (MintedAt is kept
	// in whole milliseconds).
	floor, err := s.engine.RaiseRekeyFloor(ctx, agentID, s.now().Truncate(time.Millisecond).Add(time.Millisecond))
	if err != nil {
		return contract.AgentRekeyResponse{}, fmt.Errorf("rekey: %w", err)
	}
	s.log.InfoContext(ctx, "agent re-keyed: its cron keys are replaced as its direct jobs are provisioned", "agent_id", agentID,
		"rekeyed_at", contract.FormatTime(floor))
	s.heal.nudgeAgent(ctx, agentID, contract.ReconcileReasonRekey)
	return contract.AgentRekeyResponse{AgentID: agentID, RekeyedAt: contract.NewTime(floor)}, nil
}
