package nashttp

// The operator routes, behind the operator token.

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// operatorAPI is the handlers of the operator routes (the operator's
// actions, the dead letter and the unarmed jobs) and their guard.
type operatorAPI struct {
	ops  *nas.Operator
	auth *nas.OperatorAuth
	heal *nas.SelfHeal
}

// routes registers the operator routes on e, each behind m.
func (s *operatorAPI) routes(e *echo.Echo, m ...echo.MiddlewareFunc) {
	e.POST(echoPath(contract.PathOperatorInstanceStop), s.guard(s.stopInstance), m...)
	e.POST(echoPath(contract.PathOperatorInstanceStart), s.guard(s.startInstance), m...)
	e.POST(echoPath(contract.PathOperatorAgentCancel), s.guard(s.cancelAll), m...)
	e.POST(echoPath(contract.PathOperatorAgentDisable), s.guard(s.disableAgent), m...)
	e.POST(echoPath(contract.PathOperatorAgentEnable), s.guard(s.enableAgent), m...)
	e.POST(echoPath(contract.PathOperatorAgentRekey), s.guard(s.rekeyAgent), m...)
	e.GET(contract.PathOperatorDLQ, s.guard(s.listDead), m...)
	e.POST(contract.PathOperatorDLQReplay, s.guard(s.replay), m...)
	e.GET(contract.PathOperatorUnarmed, s.guard(s.unarmed), m...)
}

// guard guards an operator route: a Bearer operator token (scripts), or
// else the dashboard's session cookie, with which a POST must also come from
// the dashboard's own origin.
func (s *operatorAPI) guard(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		authz := r.Header.Get(contract.HeaderAuthorization)
		if ck, err := r.Cookie(OperatorCookie); authz == "" && err == nil {
			if err := s.auth.AuthorizeSession(r.Context(), ck.Value); err != nil {
				return err
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
				return crossOrigin()
			}
			return h(c)
		}
		if err := s.auth.AuthorizeToken(authz); err != nil {
			return err
		}
		return h(c)
	}
}

func (s *operatorAPI) stopInstance(c echo.Context) error {
	resp, err := s.ops.StopInstance(c.Request().Context(), c.Param("instance_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) startInstance(c echo.Context) error {
	resp, err := s.ops.StartInstance(c.Request().Context(), c.Param("instance_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) disableAgent(c echo.Context) error {
	resp, err := s.ops.DisableAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) enableAgent(c echo.Context) error {
	resp, err := s.ops.EnableAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) rekeyAgent(c echo.Context) error {
	resp, err := s.ops.RekeyAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) cancelAll(c echo.Context) error {
	resp, err := s.ops.CancelAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) listDead(c echo.Context) error {
	limit, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	q := c.Request().URL.Query()
	agentID := q.Get("agent_id")
	if _, ok := q["agent_id"]; ok && (agentID == "" || len(agentID) > 256) {
		return contract.BadRequest(contract.CodeInvalidRequest, "agent_id must be 1 to 256 characters")
	}
	resp, err := s.ops.ListDead(c.Request().Context(), agentID, cursor, limit)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) replay(c echo.Context) error {
	var req contract.DLQReplayRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.ops.Replay(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *operatorAPI) unarmed(c echo.Context) error {
	q := c.Request().URL.Query()
	for k, v := range q {
		if k != "agent" {
			return contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter %q", k)
		}
		if len(v) > 1 {
			return contract.BadRequest(contract.CodeInvalidRequest, "query parameter %q given more than once", k)
		}
	}
	agentID := q.Get("agent")
	if _, ok := q["agent"]; ok && (agentID == "" || len(agentID) > 256) {
		return contract.BadRequest(contract.CodeInvalidRequest, "agent must be 1 to 256 characters")
	}
	resp, err := s.heal.Unarmed(c.Request().Context(), agentID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}
