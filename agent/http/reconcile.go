package agenthttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/chronoscron/chronos/contract"
)

// reconcile serves POST /api/cron/reconcile: NAS asks the agent to reconcile
// now (an operator started its instance again). The bearer token is a
// cron_reconcile JWT bound to the exact body; once it verifies, the request
// is answered 202 {"status":"reconciling"} and the reconcile runs after the
// answer. Refusals are those of the fire route: 401 for a token that fails
// (a fire token among them), 400/413/415 for a bad body, 503 while draining,
// without a reconciler, or while the keys are not loaded.
func (s *Server) reconcile(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r, http.MethodPost)
		return
	}
	log := s.cfg.Logger
	if s.draining.Load() {
		contract.WriteError(w, unavailable(drainingRetry, "the agent is shutting down"))
		return
	}
	token, ok := bearer(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_request"`)
		contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing bearer token"))
		return
	}
	if s.cfg.ReconcileVerifier == nil || s.cfg.Reconcile == nil {
		contract.WriteError(w, unavailable(noProviderRetry, "the chronos provider is not in use on this agent"))
		return
	}
	body, e := s.readJSONBody(w, r)
	if e != nil {
		contract.WriteError(w, e)
		return
	}
	var req contract.ReconcileRequest
	if e := contract.DecodeBytes(body, &req); e != nil {
		contract.WriteError(w, e)
		return
	}
	if req.Reason == "" {
		contract.WriteError(w, contract.BadRequest(contract.CodeInvalidRequest, "reason is required"))
		return
	}
	if rw, ok := s.cfg.ReconcileVerifier.(readyWaiter); ok {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyWait)
		_ = rw.WaitReady(ctx)
		cancel()
	}
	if err := s.cfg.ReconcileVerifier.VerifyReconcile(r.Context(), token, body); err != nil {
		var ce *contract.Error
		if errors.As(err, &ce) && ce.HTTPStatus() == http.StatusServiceUnavailable {
			log.Warn("reconcile request deferred", "reason", ce.Description)
			contract.WriteError(w, ce)
			return
		}
		desc := "reconcile token rejected"
		if ce != nil && ce.Description != "" {
			desc = ce.Description
		}
		s.rejected.warn(s.cfg.Now(), log, "reconcile request rejected", "status", http.StatusUnauthorized, "error", err)
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "%s", desc))
		return
	}
	log.Info("NAS asks for a reconcile", "reason", req.Reason, "instance_id", req.InstanceID)
	s.cfg.Reconcile(req.Reason)
	contract.WriteJSON(w, http.StatusAccepted, contract.ReconcileResponse{Status: contract.ReconcileStatusReconciling})
}
