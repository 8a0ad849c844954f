package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/contract"
)

// fireVerifier checks the cron_fire token of one fire (fireauth.JWTVerifier).
type fireVerifier interface {
	VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error
}

// demoAgent is the demo's fire endpoint over an agent.Runtime, with each
// step reported to the demo log. It follows hop 3 of the contract: verify the
// token, claim the slot synchronously, then answer (202 accepted, 200
// duplicate or gone, 503 busy); the run follows the answer.
type demoAgent struct {
	rt       *agent.Runtime
	verifier fireVerifier
	log      *demoLog
	slog     *slog.Logger
}

// maxFireBody caps a fire request body.
const maxFireBody = 64 << 10

// ServeHTTP serves POST /api/cron/fire.
func (a *demoAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != contract.PathFire {
		contract.WriteError(w, contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no route %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		contract.WriteError(w, contract.Errorf(http.StatusMethodNotAllowed, contract.CodeMethodNotAllowed, "use POST"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFireBody))
	if err != nil {
		contract.WriteError(w, contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body exceeds %d bytes", maxFireBody))
		return
	}
	var req contract.FireRequest
	if e := contract.DecodeBytes(body, &req); e != nil {
		contract.WriteError(w, e)
		return
	}
	if req.JobID == "" {
		contract.WriteError(w, contract.BadRequest(contract.CodeInvalidRequest, "job_id is required"))
		return
	}
	token, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), "Bearer ")
	if err := a.verifier.VerifyFire(r.Context(), token, body, req); err != nil {
		a.log.step(req.JobID, "token refused", err.Error())
		contract.WriteError(w, err)
		return
	}
	kid, alg := tokenHeader(token)
	a.log.step(req.JobID, stepVerified, fmt.Sprintf("%s kid %s, aud, iss, exp, purpose and body hash checked", alg, shortID(kid)))

	late := time.Since(req.FireAt.Time)
	res, err := a.rt.Fire(r.Context(), req.JobID, req.FireAt.Time, agent.TriggerScheduled)
	if err != nil {
		a.slog.Error("fire failed", "job_id", req.JobID, "error", err)
		contract.WriteError(w, contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "cannot claim now"))
		return
	}
	switch res.Status {
	case agent.FireAccepted:
		a.log.markFired(req.JobID)
		what := fmt.Sprintf("run %s (the fire arrived %s after fire_at)", res.RunID, roundDur(late))
		if res.Skipped {
			what = "slot consumed without a run: " + res.Reason
		}
		a.log.step(req.JobID, stepClaimed, what)
		contract.WriteJSON(w, http.StatusAccepted, contract.FireResponse{Status: contract.FireAccepted, JobID: req.JobID, RunID: res.RunID})
	case agent.FireDuplicate:
		a.log.step(req.JobID, "duplicate", res.Reason)
		contract.WriteJSON(w, http.StatusOK, contract.FireResponse{Status: contract.FireDuplicate, JobID: req.JobID})
	case agent.FireGone:
		a.log.step(req.JobID, "gone", res.Reason)
		contract.WriteJSON(w, http.StatusOK, contract.FireResponse{Status: contract.FireGone, JobID: req.JobID})
	default:
		e := contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "%s", res.Reason)
		e.RetryAfter = res.RetryAfter
		contract.WriteError(w, e)
	}
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
