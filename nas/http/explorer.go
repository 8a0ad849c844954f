package nashttp

// The explorer routes of the operator dashboard: the delivery history, the
// agents, one agent and its armed fires, the processes dispatching.

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
)

// explorerRoutes registers the explorer's routes on e.
func (s *dashboard) explorerRoutes(e *echo.Echo, m ...echo.MiddlewareFunc) {
	e.GET(contract.PathOperatorHistory, s.ops.guard(s.history), m...)
	e.GET(contract.PathOperatorAgents, s.ops.guard(s.agents), m...)
	e.GET(echoPath(contract.PathOperatorAgent), s.ops.guard(s.agentView), m...)
	e.GET(echoPath(contract.PathOperatorAgentArmed), s.ops.guard(s.agentArmed), m...)
	e.GET(contract.PathOperatorProcesses, s.ops.guard(s.processes), m...)
}

// queryParams checks that q has only the allowed parameters, each at most
// once, and that the text ones are at most 256 characters.
func queryParams(q url.Values, allowed ...string) error {
	for k, v := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter %q", k)
		}
		if len(v) > 1 {
			return contract.BadRequest(contract.CodeInvalidRequest, "query parameter %q given more than once", k)
		}
		if len(v[0]) > 256 || strings.ContainsRune(v[0], 0) {
			return contract.BadRequest(contract.CodeInvalidRequest, "query parameter %q must be at most 256 characters", k)
		}
	}
	return nil
}

func (s *dashboard) history(c echo.Context) error {
	q := c.Request().URL.Query()
	if err := queryParams(q, "window"); err != nil {
		return err
	}
	window := contract.HistoryWindowHour
	if v, ok := q["window"]; ok {
		window = v[0]
		if window != contract.HistoryWindowHour && window != contract.HistoryWindowDay {
			return contract.BadRequest(contract.CodeInvalidRequest, "window must be %q or %q", contract.HistoryWindowHour, contract.HistoryWindowDay)
		}
	}
	resp, err := s.explorer.History(c.Request().Context(), window)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *dashboard) agents(c echo.Context) error {
	q := c.Request().URL.Query()
	if err := queryParams(q, "q", "limit", "cursor"); err != nil {
		return err
	}
	limit, cursor, err := limitAndCursor(q)
	if err != nil {
		return err
	}
	resp, err := s.explorer.Agents(c.Request().Context(), q.Get("q"), cursor, limit)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *dashboard) agentView(c echo.Context) error {
	if err := queryParams(c.Request().URL.Query()); err != nil {
		return err
	}
	resp, err := s.explorer.Agent(c.Request().Context(), c.Param("agent_id"))
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *dashboard) agentArmed(c echo.Context) error {
	q := c.Request().URL.Query()
	if err := queryParams(q, "job", "limit", "cursor"); err != nil {
		return err
	}
	limit, cursor, err := limitAndCursor(q)
	if err != nil {
		return err
	}
	resp, err := s.explorer.AgentArmed(c.Request().Context(), c.Param("agent_id"), q.Get("job"), cursor, limit)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *dashboard) processes(c echo.Context) error {
	if err := queryParams(c.Request().URL.Query()); err != nil {
		return err
	}
	resp, err := s.explorer.Processes(c.Request().Context())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}
