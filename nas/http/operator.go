package nashttp

// The operator routes, behind the operator token.

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

// operator guards an operator route: a Bearer operator token (scripts), or
// else the dashboard's session cookie, with which a POST must also come from
// the dashboard's own origin.
func (s *Server) operator(h echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		authz := r.Header.Get(contract.HeaderAuthorization)
		if ck, err := r.Cookie(OperatorCookie); authz == "" && err == nil {
			if err := s.svc.AuthorizeOperatorSession(r.Context(), ck.Value); err != nil {
				return err
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
				return crossOrigin()
			}
			return h(c)
		}
		if err := s.svc.AuthorizeOperator(authz); err != nil {
			return err
		}
		return h(c)
	}
}

func (s *Server) stopInstance(c echo.Context) error {
	resp, err := s.svc.StopInstance(c.Request().Context(), c.Param("instance_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) startInstance(c echo.Context) error {
	resp, err := s.svc.StartInstance(c.Request().Context(), c.Param("instance_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) disableAgent(c echo.Context) error {
	resp, err := s.svc.DisableAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) enableAgent(c echo.Context) error {
	resp, err := s.svc.EnableAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) rekeyAgent(c echo.Context) error {
	resp, err := s.svc.RekeyAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) cancelAll(c echo.Context) error {
	resp, err := s.svc.CancelAgent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) listDead(c echo.Context) error {
	limit, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	q := c.Request().URL.Query()
	agentID := q.Get("agent_id")
	if _, ok := q["agent_id"]; ok && (agentID == "" || len(agentID) > 256) {
		return contract.BadRequest(contract.CodeInvalidRequest, "agent_id must be 1 to 256 characters")
	}
	resp, err := s.svc.ListDead(c.Request().Context(), agentID, cursor, limit)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) replay(c echo.Context) error {
	var req contract.DLQReplayRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.svc.Replay(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *Server) unarmed(c echo.Context) error {
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
	resp, err := s.svc.Unarmed(c.Request().Context(), agentID)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}
