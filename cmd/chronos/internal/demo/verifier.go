package demo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/contract"
)

// observedVerifier is the agent's fire-token verifier with each accepted
// token reported to the narration as the "token verified" step.
type observedVerifier struct {
	v        agenthttp.FireVerifier
	narrator *narrator
}

var _ agenthttp.FireVerifier = observedVerifier{}

// VerifyFire verifies as the wrapped verifier does and reports a success.
func (o observedVerifier) VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error {
	if err := o.v.VerifyFire(ctx, token, body, req); err != nil {
		return err
	}
	o.narrator.markFired(req.JobID) // its next arm is a re-arm
	kid, alg := tokenHeader(token)
	o.narrator.step(req.JobID, stepVerified, fmt.Sprintf("%s kid %s: signature, aud, iss, exp, purpose and body hash checked", alg, shortID(kid)))
	return nil
}

// keyWaiter is a verifier that can wait for the keys it verifies with.
type keyWaiter interface {
	WaitReady(ctx context.Context) error
}

// WaitReady waits for the wrapped verifier's keys.
func (o observedVerifier) WaitReady(ctx context.Context) error {
	w, ok := o.v.(keyWaiter)
	if !ok {
		return errors.New("the agent's token verifier cannot say when it has NAS's keys")
	}
	return w.WaitReady(ctx)
}

// tokenHeader reads kid and alg from a JWT's header without verifying it
// (only for display, after the verifier accepted the token).
func tokenHeader(token string) (kid, alg string) {
	head, _, _ := strings.Cut(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return "", ""
	}
	var h struct {
		Kid string `json:"kid"`
		Alg string `json:"alg"`
	}
	_ = json.Unmarshal(raw, &h)
	return h.Kid, h.Alg
}

// shortID shortens a long identifier for display.
func shortID(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}
