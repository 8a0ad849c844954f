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
	resp, err := s.svc.Relay(r.Context(), nas.RelayHeaders{
		ID:        r.Header.Get(contract.HeaderWebhookID),
		Timestamp: r.Header.Get(contract.HeaderWebhookTimestamp),
		Signature: r.Header.Get(contract.HeaderWebhookSignature),
	}, body)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, resp)
}
