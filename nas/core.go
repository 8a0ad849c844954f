package nas

// What every part of the Service shares: its dependencies, read-only after
// New, and the few checks and answers more than one part gives.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// core is what every part of the Service is built on. Its fields are set by
// New and not changed after.
type core struct {
	cfg           Config
	engine        relay.Engine
	verifier      AgentVerifier
	keys          *KeyRing
	log           *slog.Logger
	now           func() time.Time
	caller        FireCaller
	policy        CallbackPolicy
	minter        *Minter
	secrets       [][]byte
	cursors       cursorSigner
	limiter       *agentLimiter
	metrics       *Metrics
	operatorToken []byte
	// source is the agents file's flow control and policies; nil without
	// one.
	source AgentPolicySource
	// summary counts the arms and fires of the periodic INFO summary.
	summary *fireSummary
}

// hasOperator reports whether the operator routes are enabled.
func (s *core) hasOperator() bool { return len(s.operatorToken) > 0 }

// engineErr maps the engine errors an agent can cause to their answers and
// wraps any other with op.
func (s *core) engineErr(op string, err error) error {
	switch {
	case errors.Is(err, relay.ErrQuotaExceeded):
		return contract.Errorf(http.StatusUnprocessableEntity, contract.CodeQuotaExceeded,
			"the agent already has %d armed jobs", s.cfg.Limits.MaxArmedPerAgent)
	case errors.Is(err, relay.ErrInvalidCursor):
		return contract.BadRequest(contract.CodeInvalidCursor, "cursor is not one NAS issued to this agent")
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// operatorErr wraps err with what failed unless it is already an answer
// (a *contract.Error such as 404 for an unknown id).
func (s *core) operatorErr(what string, err error) error {
	if ce := (*contract.Error)(nil); errors.As(err, &ce) {
		return ce
	}
	return s.engineErr(what, err)
}

// checkAgentKnown answers 404 for an agent NAS does not know; it reads the
// store (see agentKnown).
func (s *core) checkAgentKnown(ctx context.Context, agentID string) error {
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

// agentKnown reports whether NAS knows agentID: the agents file lists it,
// or the store holds something of it (a policy or flow state, an armed
// fire, a last fire, a dead letter).
func (s *core) agentKnown(ctx context.Context, agentID string, fl relay.AgentFlow) (bool, error) {
	if s.source != nil {
		if policies, _ := s.source.AgentPolicies(); policies != nil {
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
