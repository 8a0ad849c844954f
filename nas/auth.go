package nas

// The two callers NAS knows: agents (a token a verifier checks, then a rate
// limit) and the operator (one shared token).

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"

	"github.com/chronoscron/chronos/contract"
)

// Authorize identifies the agent of an Authorization header and takes one
// token of its rate limit. Errors are *contract.Error: 401 unauthenticated
// (missing or malformed header), 401 invalid_token, 403 invalid_client (not
// a provisioned agent, or one the operator or the agents file disabled:
// known from memory, never from a store read that could fail), 429
// rate_limited with RetryAfter.
func (s *Service) Authorize(ctx context.Context, authorization string) (Identity, error) {
	token, ok := contract.BearerToken(authorization)
	if !ok {
		return Identity{}, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing or malformed Authorization: Bearer header")
	}
	id, err := s.verifier.VerifyAgent(ctx, token)
	switch {
	case errors.Is(err, ErrUnknownAgent):
		return Identity{}, contract.Errorf(http.StatusForbidden, contract.CodeInvalidClient, "the token is not a provisioned agent")
	case err != nil:
		return Identity{}, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "the token could not be verified")
	}
	if s.AgentDisabled(id.AgentID) {
		return Identity{}, errAgentDisabled()
	}
	if allowed, wait := s.limiter.Allow(id.AgentID, s.now()); !allowed {
		e := contract.Errorf(http.StatusTooManyRequests, contract.CodeRateLimited, "too many calls; retry later")
		e.RetryAfter = wait
		return Identity{}, e
	}
	return id, nil
}

// AuthorizeOperator checks an operator bearer token in constant time: 401
// unauthenticated without one, 403 forbidden for a wrong one, 404 when the
// operator routes are disabled.
func (s *Service) AuthorizeOperator(authorization string) error {
	if !s.HasOperator() {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	tok, ok := contract.BearerToken(authorization)
	if !ok {
		return contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing or malformed Authorization: Bearer header")
	}
	if subtle.ConstantTimeCompare([]byte(tok), s.operator) != 1 {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "wrong operator token")
	}
	return nil
}
