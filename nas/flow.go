package nas

// Many agents on one NAS: the agents file's flow control written to the
// store, the kill switch (disable and enable an agent), the disabled set
// every process keeps in memory, and the per-agent phase that spreads fires
// with a flexible window. The dispatchers enforce the flow control in the
// store (relay.Flow); NAS sets it and refuses a disabled agent's calls.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// AgentsRefreshInterval is how often a NAS process reads the agents the
// store has disabled (a disable done through another process shows within
// it) and applies a reloaded agents file's flow control.
const AgentsRefreshInterval = 2 * time.Second

// flowState is the Service's part for the above.
type flowState struct {
	// source is the agents file's flow control; nil without one.
	source AgentPolicySource

	mu sync.Mutex
	// disabled are the agents the store had disabled at the last refresh,
	// with this process's own changes since.
	disabled map[string]bool
	// changes counts this process's disables and enables: a refresh that
	// read the store before one of them does not overwrite it.
	changes uint64
	// fileGen is the generation of the agents file last applied (0: none).
	fileGen uint64
	// applied is what this process last applied from the agents file, per
	// agent: a field a reload removes is reset in the store.
	applied map[string]FilePolicy
	// failing says the last sync failed (logged once until it recovers).
	failing bool

	// phases caches each agent's spreading phase (relay.Flows.AgentPhase):
	// stable once assigned, so read from the store once per process.
	phases sync.Map // agent id → float64
}

// policySource finds the agents file in a verifier: the verifier itself, the
// opaque verifier of a MultiVerifier, or the session resolver of its JWT
// verifier.
func policySource(v AgentVerifier) AgentPolicySource {
	switch x := v.(type) {
	case AgentPolicySource:
		return x
	case MultiVerifier:
		if src := policySource(x.Opaque); src != nil {
			return src
		}
		return policySource(x.JWT)
	case *MultiVerifier:
		if x != nil {
			return policySource(*x)
		}
	case *JWTAgents:
		if src, ok := x.Sessions.(AgentPolicySource); ok {
			return src
		}
	}
	return nil
}

// initFlow finds the agents file and applies its flow control once, best
// effort: WatchAgents (or the next SyncAgents) retries a failure.
func (s *Service) initFlow() {
	s.flow.source = policySource(s.verifier)
	s.flow.disabled = map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), AgentsRefreshInterval)
	defer cancel()
	if err := s.SyncAgents(ctx); err != nil {
		s.log.Warn("applying the agents' flow control failed; retried every "+AgentsRefreshInterval.String(), "error", err)
		s.flow.mu.Lock()
		s.flow.failing = true
		s.flow.mu.Unlock()
	}
}

// WatchAgents runs SyncAgents every AgentsRefreshInterval until ctx ends: a
// reloaded agents file is applied to the store, and the agents another
// process disabled or enabled are refused or served here within it.
func (s *Service) WatchAgents(ctx context.Context) {
	t := time.NewTicker(AgentsRefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := s.SyncAgents(ctx)
		if ctx.Err() != nil {
			return
		}
		s.flow.mu.Lock()
		was := s.flow.failing
		s.flow.failing = err != nil
		s.flow.mu.Unlock()
		switch {
		case err != nil && !was:
			s.log.WarnContext(ctx, "reading the agents' flow control failed; the last known disabled agents stay refused", "error", err)
		case err == nil && was:
			s.log.InfoContext(ctx, "agents' flow control read again")
		}
	}
}

// SyncAgents applies the agents file's flow control to the store when the
// file was (re)loaded since it was last applied, then reads the agents the
// store has disabled.
func (s *Service) SyncAgents(ctx context.Context) error {
	if err := s.applyAgentsFile(ctx); err != nil {
		return err
	}
	return s.refreshDisabled(ctx)
}

// applyAgentsFile writes each listed agent's policy from the agents file,
// keeping what the file does not set: a field the file sets wins; a field
// (or disabled: true) this process saw the file set and that a reload
// removed is reset (the agent is enabled); anything else stays as the store
// has it, so a restart does not enable an agent an operator disabled.
func (s *Service) applyAgentsFile(ctx context.Context) error {
	if s.flow.source == nil {
		return nil
	}
	policies, gen := s.flow.source.AgentPolicies()
	s.flow.mu.Lock()
	done, applied := s.flow.fileGen == gen, s.flow.applied
	s.flow.mu.Unlock()
	if done {
		return nil
	}
	agents := make([]string, 0, len(policies)+len(applied))
	for a := range policies {
		agents = append(agents, a)
	}
	for a := range applied {
		if _, ok := policies[a]; !ok {
			agents = append(agents, a)
		}
	}
	slices.Sort(agents)
	for _, a := range agents {
		if err := s.applyFilePolicy(ctx, a, policies[a], applied[a]); err != nil {
			return err
		}
	}
	s.flow.mu.Lock()
	s.flow.fileGen, s.flow.applied = gen, policies
	s.flow.mu.Unlock()
	return nil
}

// applyFilePolicy writes agentID's policy as the file now says (now) after
// it said prev.
func (s *Service) applyFilePolicy(ctx context.Context, agentID string, now, prev FilePolicy) error {
	fl, err := s.engine.AgentFlow(ctx, agentID)
	if err != nil {
		return fmt.Errorf("agents file: reading the policy of %s: %w", agentID, err)
	}
	p := fl.Policy
	switch {
	case now.Parallelism != nil:
		p.Parallelism = *now.Parallelism
	case prev.Parallelism != nil:
		p.Parallelism = 0
	}
	switch {
	case now.Rate != nil:
		p.Rate = *now.Rate
	case prev.Rate != nil:
		p.Rate = 0
	}
	switch {
	case now.Disabled:
		p.Disabled = true
	case prev.Disabled:
		p.Disabled = false
	}
	if p == fl.Policy {
		return nil
	}
	if err := s.engine.SetAgentPolicy(ctx, agentID, p); err != nil {
		return fmt.Errorf("agents file: writing the policy of %s: %w", agentID, err)
	}
	s.log.InfoContext(ctx, "agent flow control set from the agents file", "agent_id", agentID,
		"parallelism", p.Parallelism, "rate", p.Rate, "disabled", p.Disabled)
	s.noteDisabled(agentID, p.Disabled)
	return nil
}

// refreshDisabled reads the agents the store has disabled into the cache,
// unless this process disabled or enabled one meanwhile (the next refresh
// reads it).
func (s *Service) refreshDisabled(ctx context.Context) error {
	s.flow.mu.Lock()
	changes := s.flow.changes
	s.flow.mu.Unlock()
	flows, err := s.engine.AgentFlows(ctx)
	if err != nil {
		return fmt.Errorf("reading the agents' flow control: %w", err)
	}
	disabled := map[string]bool{}
	for _, f := range flows {
		if f.Policy.Disabled {
			disabled[f.AgentID] = true
		}
	}
	s.flow.mu.Lock()
	if s.flow.changes == changes {
		s.flow.disabled = disabled
	}
	s.flow.mu.Unlock()
	return nil
}

// noteDisabled records this process's own change of agentID in the cache.
func (s *Service) noteDisabled(agentID string, disabled bool) {
	s.flow.mu.Lock()
	defer s.flow.mu.Unlock()
	s.flow.changes++
	if disabled {
		s.flow.disabled[agentID] = true
	} else {
		delete(s.flow.disabled, agentID)
	}
}

// fileDisabled reports whether the agents file disables agentID.
func (s *Service) fileDisabled(agentID string) bool {
	if s.flow.source == nil {
		return false
	}
	policies, _ := s.flow.source.AgentPolicies()
	return policies[agentID].Disabled
}

// AgentDisabled reports whether agentID is disabled, from memory: the
// agents file, and the store's disabled agents as last read (at most
// AgentsRefreshInterval ago, and at once for this process's own changes).
// It never reads the store.
func (s *Service) AgentDisabled(agentID string) bool {
	if s.fileDisabled(agentID) {
		return true
	}
	s.flow.mu.Lock()
	defer s.flow.mu.Unlock()
	return s.flow.disabled[agentID]
}

// errAgentDisabled is the answer to every API call of a disabled agent:
// the code of an agent NAS does not accept, so that it stops calling.
func errAgentDisabled() *contract.Error {
	return contract.Errorf(http.StatusForbidden, contract.CodeInvalidClient, "the operator disabled this agent at NAS")
}

// DisableAgent is the kill switch: every fire of agentID is held in the
// store (none is delivered, none is lost) and its API calls are refused
// with 403 invalid_client, in every NAS process within
// AgentsRefreshInterval, until EnableAgent. An agent NAS knows nothing of
// is 404 and nothing changes.
func (s *Service) DisableAgent(ctx context.Context, agentID string) (contract.AgentStateResponse, error) {
	return s.setAgentDisabled(ctx, agentID, true)
}

// EnableAgent ends DisableAgent: the agent's held fires go out (those more
// than relay.misfire_grace late are dead-lettered, and so reported to the
// agent as failed fires) and its calls are served again. An agent the
// agents file disables cannot be enabled here: 409 conflict.
func (s *Service) EnableAgent(ctx context.Context, agentID string) (contract.AgentStateResponse, error) {
	return s.setAgentDisabled(ctx, agentID, false)
}

func (s *Service) setAgentDisabled(ctx context.Context, agentID string, disabled bool) (contract.AgentStateResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.AgentStateResponse{}, e
	}
	if !disabled && s.fileDisabled(agentID) {
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
	s.noteDisabled(agentID, disabled)
	s.invalidateCensus()
	s.log.InfoContext(ctx, "agent state changed", "agent_id", agentID, "disabled", disabled)
	if changed && !disabled {
		s.nudgeAgent(ctx, agentID, contract.ReconcileReasonAgentEnabled)
	}
	return contract.AgentStateResponse{AgentID: agentID, Disabled: disabled}, nil
}

// nudgeAgent asks the instances of agentID that hold armed fires to
// reconcile, giving reason (in the background, see nudge): an agent enabled
// again learns it at once, where its calls were refused while it was
// disabled, instead of at its next resync, and a re-keyed one provisions its
// direct jobs for their new keys. An agent with nothing armed is not asked:
// NAS knows no callback of it to ask.
func (s *Service) nudgeAgent(ctx context.Context, agentID, reason string) {
	items, _, err := s.engine.List(ctx, agentID, "", nudgeListLimit)
	if err != nil {
		s.log.WarnContext(ctx, "reconcile request not sent: listing the agent's fires failed; it heals on its own resync", "agent_id", agentID, "error", err)
		return
	}
	seen := make(map[string]bool, 1)
	for _, o := range items {
		if o.InstanceID == "" || seen[o.InstanceID] {
			continue
		}
		seen[o.InstanceID] = true
		s.nudge(ctx, o.InstanceID, reason)
	}
}

// nudgeListLimit is how many of an agent's armed fires nudgeAgent reads to
// find its instances (an agent has one instance, as a rule).
const nudgeListLimit = 100

// agentKnown reports whether NAS knows agentID: the agents file lists it,
// or the store holds something of it (a policy or flow state, an armed
// fire, a last fire, a dead letter).
func (s *Service) agentKnown(ctx context.Context, agentID string, fl relay.AgentFlow) (bool, error) {
	if s.flow.source != nil {
		if policies, _ := s.flow.source.AgentPolicies(); policies != nil {
			if _, ok := policies[agentID]; ok {
				return true, nil
			}
		}
	}
	if fl.Policy != (relay.AgentPolicy{}) || fl.InFlight > 0 || fl.Held > 0 || fl.Probing || fl.Failures > 0 {
		return true, nil
	}
	armed, _, err := s.engine.List(ctx, agentID, "", 1)
	if err != nil || len(armed) > 0 {
		return len(armed) > 0, err
	}
	fires, err := s.engine.LastFiresOf(ctx, agentID, time.Time{})
	if err != nil || len(fires) > 0 {
		return len(fires) > 0, err
	}
	dead, _, err := s.engine.ListDead(ctx, agentID, "", 1)
	return len(dead) > 0, err
}

// agentPhase returns agentID's spreading phase, read from the store once
// per process.
func (s *Service) agentPhase(ctx context.Context, agentID string) (float64, error) {
	if v, ok := s.flow.phases.Load(agentID); ok {
		return v.(float64), nil
	}
	phase, err := s.engine.AgentPhase(ctx, agentID)
	if err != nil {
		return 0, fmt.Errorf("agent phase: %w", err)
	}
	s.flow.phases.Store(agentID, phase)
	return phase, nil
}
