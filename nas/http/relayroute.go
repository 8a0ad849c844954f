package nashttp

// The relay route: the signed call a dispatcher delivers each fire with.

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

func (s *Server) relay(c echo.Context) error {
	r := c.Request()
	if e := contract.CheckJSONContentType(r.Header.Get(contract.HeaderContentType)); e != nil {
		return e
	}
	limit := int64(contract.DefaultMaxBodyBytes)
	if r.ContentLength > limit {
		return contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body exceeds %d bytes", limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return contract.Errorf(http.StatusRequestEntityTooLarge, contract.CodeBodyTooLarge, "body exceeds %d bytes", limit)
		}
		return contract.BadRequest(contract.CodeInvalidRequest, "reading body failed")
	}
	v, err := s.svc.Fires().Relay(r.Context(), nas.RelayHeaders{
		ID:        r.Header.Get(contract.HeaderWebhookID),
		Timestamp: r.Header.Get(contract.HeaderWebhookTimestamp),
		Signature: r.Header.Get(contract.HeaderWebhookSignature),
	}, body)
	if err != nil {
		return err
	}
	resp, e := relayAnswer(v)
	if e != nil {
		return e
	}
	return writeJSON(c, http.StatusOK, resp)
}

// relayAnswer is the wire form of NAS's verdict on a relayed fire: a final
// verdict is a 200 RelayResponse; a retry is agent_unavailable with the
// agent's Retry-After (handleError writes "0" for none), 503 when the agent
// is not answering (the relay then holds the agent's fires and probes it),
// else 502.
func relayAnswer(v nas.Verdict) (contract.RelayResponse, *contract.Error) {
	switch v.Kind {
	case nas.VerdictDelivered:
		return contract.RelayResponse{Status: contract.RelayDelivered, AgentStatus: v.AgentStatus}, nil
	case nas.VerdictDropped:
		return contract.RelayResponse{Status: contract.RelayDropped, Reason: v.Reason}, nil
	case nas.VerdictInstanceStopped:
		return contract.RelayResponse{Status: contract.RelayInstanceStopped}, nil
	case nas.VerdictDuplicate:
		return contract.RelayResponse{Status: contract.RelayDuplicate}, nil
	case nas.VerdictRejected:
		return contract.RelayResponse{Status: contract.RelayRejected, Reason: v.Reason}, nil
	}
	status := http.StatusBadGateway
	if v.AgentDown {
		status = http.StatusServiceUnavailable
	}
	e := contract.Errorf(status, contract.CodeAgentUnavailable, "%s", v.Reason)
	e.RetryAfter = v.RetryAfter
	return contract.RelayResponse{}, e
}
