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
)

// AgentsRefreshInterval is how often a NAS process reads the agents the
// store has disabled (a disable done through another process shows within
// it) and applies a reloaded agents file's flow control.
const AgentsRefreshInterval = 2 * time.Second

// Flow is the Service's part for the above: it writes the agents file's
// flow control to the store and keeps the disabled agents in memory.
type Flow struct {
	*core

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

// newFlow applies the agents file's flow control once, best effort:
// WatchAgents (or the next SyncAgents) retries a failure.
func newFlow(c *core) *Flow {
	s := &Flow{core: c, disabled: map[string]bool{}}
	ctx, cancel := context.WithTimeout(context.Background(), AgentsRefreshInterval)
	defer cancel()
	if err := s.SyncAgents(ctx); err != nil {
		s.log.Warn("applying the agents' flow control failed; retried every "+AgentsRefreshInterval.String(), "error", err)
		s.mu.Lock()
		s.failing = true
		s.mu.Unlock()
	}
	return s
}

// WatchAgents runs SyncAgents every AgentsRefreshInterval until ctx ends: a
// reloaded agents file is applied to the store, and the agents another
// process disabled or enabled are refused or served here within it.
func (s *Flow) WatchAgents(ctx context.Context) {
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
		s.mu.Lock()
		was := s.failing
		s.failing = err != nil
		s.mu.Unlock()
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
func (s *Flow) SyncAgents(ctx context.Context) error {
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
func (s *Flow) applyAgentsFile(ctx context.Context) error {
	if s.source == nil {
		return nil
	}
	policies, gen := s.source.AgentPolicies()
	s.mu.Lock()
	done, applied := s.fileGen == gen, s.applied
	s.mu.Unlock()
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
	s.mu.Lock()
	s.fileGen, s.applied = gen, policies
	s.mu.Unlock()
	return nil
}

// applyFilePolicy writes agentID's policy as the file now says (now) after
// it said prev.
func (s *Flow) applyFilePolicy(ctx context.Context, agentID string, now, prev FilePolicy) error {
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
func (s *Flow) refreshDisabled(ctx context.Context) error {
	s.mu.Lock()
	changes := s.changes
	s.mu.Unlock()
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
	s.mu.Lock()
	if s.changes == changes {
		s.disabled = disabled
	}
	s.mu.Unlock()
	return nil
}

// noteDisabled records this process's own change of agentID in the cache.
func (s *Flow) noteDisabled(agentID string, disabled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes++
	if disabled {
		s.disabled[agentID] = true
	} else {
		delete(s.disabled, agentID)
	}
}

// fileDisabled reports whether the agents file disables agentID.
func (s *Flow) fileDisabled(agentID string) bool {
	if s.source == nil {
		return false
	}
	policies, _ := s.source.AgentPolicies()
	return policies[agentID].Disabled
}

// AgentDisabled reports whether agentID is disabled, from memory: the
// agents file, and the store's disabled agents as last read (at most
// AgentsRefreshInterval ago, and at once for this process's own changes).
// It never reads the store.
func (s *Flow) AgentDisabled(agentID string) bool {
	if s.fileDisabled(agentID) {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disabled[agentID]
}

// errAgentDisabled is the answer to every API call of a disabled agent:
// the code of an agent NAS does not accept, so that it stops calling.
func errAgentDisabled() *contract.Error {
	return contract.Errorf(http.StatusForbidden, contract.CodeInvalidClient, "the operator disabled this agent at NAS")
}

// agentPhase returns agentID's spreading phase, read from the store once
// per process.
func (s *Flow) agentPhase(ctx context.Context, agentID string) (float64, error) {
	if v, ok := s.phases.Load(agentID); ok {
		return v.(float64), nil
	}
	phase, err := s.engine.AgentPhase(ctx, agentID)
	if err != nil {
		return 0, fmt.Errorf("agent phase: %w", err)
	}
	s.phases.Store(agentID, phase)
	return phase, nil
}
