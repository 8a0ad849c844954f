package nashttp

// The agent API: every route authenticates the agent first, then decodes
// its body strictly.

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// agentAPI is the handlers of the agent API.
type agentAPI struct {
	api *nas.AgentAPI
}

// routes registers the agent API on e.
func (s *agentAPI) routes(e *echo.Echo) {
	e.POST(contract.PathProvision, s.agent(s.provision))
	e.POST(contract.PathCancel, s.agent(s.cancel))
	e.GET(contract.PathList, s.agent(s.list))
	e.PUT(contract.PathArmed, s.agent(s.putArmed))
	e.POST(contract.PathFailedFiresAck, s.agent(s.ackFailedFires))
}

type agentHandler func(c echo.Context, id nas.Identity) error

// agent authenticates the caller from its token alone (and takes one token
// of its rate limit) before the handler reads anything else.
func (s *agentAPI) agent(h agentHandler) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := s.api.Authorize(c.Request().Context(), c.Request().Header.Get(contract.HeaderAuthorization))
		if err != nil {
			return err
		}
		return h(c, id)
	}
}

func decode(c echo.Context, limit int64, v any) error {
	if e := contract.DecodeRequest(c.Response(), c.Request(), limit, v); e != nil {
		return e
	}
	return nil
}

func (s *agentAPI) provision(c echo.Context, id nas.Identity) error {
	var req contract.ProvisionRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.api.Provision(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *agentAPI) cancel(c echo.Context, id nas.Identity) error {
	var req contract.CancelRequest
	if err := decode(c, contract.DefaultMaxBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.api.Cancel(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

// pageParams reads limit and cursor; an absent limit is 0 (list: every
// armed job; the dead letter: the largest page). A limit too large for an
// int is clamped like any large one.
func pageParams(c echo.Context) (int, string, error) {
	q := c.Request().URL.Query()
	for k := range q {
		if k != "limit" && k != "cursor" && k != "agent_id" {
			return 0, "", contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter %q", k)
		}
		if len(q[k]) > 1 {
			return 0, "", contract.BadRequest(contract.CodeInvalidRequest, "query parameter %q given more than once", k)
		}
	}
	return limitAndCursor(q)
}

// limitAndCursor reads the limit and cursor of a paged list: an absent
// limit is 0, one too large for an int is clamped like any large one, an
// empty cursor is refused.
func limitAndCursor(q url.Values) (int, string, error) {
	limit := 0
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v[0], "-") {
			n, err = contract.MaxListLimit, nil
		}
		if err != nil || n < 1 {
			return 0, "", contract.BadRequest(contract.CodeInvalidRequest, "limit must be a positive integer")
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if _, ok := q["cursor"]; ok && cursor == "" {
		return 0, "", contract.BadRequest(contract.CodeInvalidCursor, "cursor must not be empty")
	}
	return limit, cursor, nil
}

func (s *agentAPI) list(c echo.Context, id nas.Identity) error {
	if _, ok := c.Request().URL.Query()["agent_id"]; ok {
		return contract.BadRequest(contract.CodeInvalidRequest, "unknown query parameter \"agent_id\"")
	}
	limit, cursor, err := pageParams(c)
	if err != nil {
		return err
	}
	resp, err := s.api.List(c.Request().Context(), id, limit, cursor)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *agentAPI) ackFailedFires(c echo.Context, id nas.Identity) error {
	var req contract.FailedFiresAckRequest
	// Up to 1000 ids of up to 256 bytes: more than the small-body limit.
	if err := decode(c, contract.DefaultMaxBulkBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.api.AckFailedFires(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}

func (s *agentAPI) putArmed(c echo.Context, id nas.Identity) error {
	var req contract.PutArmedRequest
	if err := decode(c, contract.DefaultMaxBulkBodyBytes, &req); err != nil {
		return err
	}
	resp, err := s.api.PutArmed(c.Request().Context(), id, req)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}
