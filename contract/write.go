package contract

import (
	"encoding/json"
	"errors"
	"net/http"
)

// WriteJSON answers with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set(HeaderContentType, MediaTypeJSON)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError answers with err's status, Retry-After and error body. Errors
// that are not *Error become a 500 server_error without their text.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Code: CodeServerError, Description: "internal error"}
	}
	if ra := e.RetryAfterHeader(); ra != "" {
		w.Header().Set(HeaderRetryAfter, ra)
	}
	WriteJSON(w, e.HTTPStatus(), e)
}
