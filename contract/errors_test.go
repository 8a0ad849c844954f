package contract_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
)

func TestErrorStatusByCode(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]int{
		contract.CodeInvalidRequest:       400,
		contract.CodeInvalidJSON:          400,
		contract.CodeUnknownField:         400,
		contract.CodeDuplicateKey:         400,
		contract.CodeTrailingData:         400,
		contract.CodeInvalidJobID:         400,
		contract.CodeInvalidFireAt:        400,
		contract.CodeInvalidDedupKey:      400,
		contract.CodeInvalidCursor:        400,
		contract.CodeBodyTooLarge:         413,
		contract.CodeUnsupportedMediaType: 415,
		contract.CodeFireAtInPast:         422,
		contract.CodeFireAtTooFar:         422,
		contract.CodeQuotaExceeded:        422,
		contract.CodeUnauthenticated:      401,
		contract.CodeInvalidToken:         401,
		contract.CodeInvalidSignature:     401,
		contract.CodeInvalidClient:        403,
		contract.CodeForbidden:            403,
		contract.CodeNotFound:             404,
		contract.CodeConflict:             409,
		contract.CodeMethodNotAllowed:     405,
		contract.CodeRateLimited:          429,
		contract.CodeUnavailable:          503,
		contract.CodeAgentUnavailable:     503,
		contract.CodeStoreUnavailable:     503,
		contract.CodeServerError:          500,
	} {
		if got := (&contract.Error{Code: code}).HTTPStatus(); got != want {
			t.Errorf("%s: status %d, want %d", code, got, want)
		}
	}
	if got := (&contract.Error{Code: contract.CodeAgentUnavailable, Status: 502}).HTTPStatus(); got != 502 {
		t.Errorf("an explicit status wins: got %d", got)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                       "",
		-time.Second:            "",
		time.Nanosecond:         "1",
		time.Second:             "1",
		1500 * time.Millisecond: "2",
		2 * time.Minute:         "120",
	} {
		if got := (&contract.Error{RetryAfter: d}).RetryAfterHeader(); got != want {
			t.Errorf("RetryAfter %s: header %q, want %q", d, got, want)
		}
	}
}

func TestWriteError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		err        error
		wantStatus int
		wantBody   string
		wantRetry  string
	}{
		{"bad request", contract.BadRequest(contract.CodeInvalidJobID, "job_id %q is invalid", "a b"), 400,
			`{"error":"invalid_job_id","error_description":"job_id \"a b\" is invalid"}`, ""},
		{"no description", &contract.Error{Code: contract.CodeInvalidClient}, 403, `{"error":"invalid_client"}`, ""},
		{"rate limited", &contract.Error{Code: contract.CodeRateLimited, RetryAfter: 3 * time.Second}, 429, `{"error":"rate_limited"}`, "3"},
		{"wrapped", fmt.Errorf("provision: %w", &contract.Error{Code: contract.CodeQuotaExceeded}), 422, `{"error":"quota_exceeded"}`, ""},
		{"foreign error hides its text", errors.New("redis: connection refused at 10.0.0.3"), 500,
			`{"error":"server_error","error_description":"internal error"}`, ""},
	} {
		rec := httptest.NewRecorder()
		contract.WriteError(rec, tc.err)
		if rec.Code != tc.wantStatus {
			t.Errorf("%s: status %d, want %d", tc.name, rec.Code, tc.wantStatus)
		}
		if got := rec.Body.String(); got != tc.wantBody+"\n" {
			t.Errorf("%s: body %s, want %s", tc.name, got, tc.wantBody)
		}
		if got := rec.Header().Get(contract.HeaderRetryAfter); got != tc.wantRetry {
			t.Errorf("%s: Retry-After %q, want %q", tc.name, got, tc.wantRetry)
		}
		if ct := rec.Header().Get(contract.HeaderContentType); ct != contract.MediaTypeJSON {
			t.Errorf("%s: Content-Type %q", tc.name, ct)
		}
	}
}

func TestErrorString(t *testing.T) {
	t.Parallel()
	if got := contract.BadRequest(contract.CodeInvalidJSON, "body is empty").Error(); got != "invalid_json: body is empty" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&contract.Error{Code: contract.CodeForbidden}).Error(); got != "forbidden" {
		t.Errorf("Error() = %q", got)
	}
}

func TestWriteJSON(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	contract.WriteJSON(rec, http.StatusAccepted, contract.FireResponse{Status: contract.FireAccepted, JobID: "j1", RunID: "r1"})
	if rec.Code != http.StatusAccepted || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("status %d, Cache-Control %q", rec.Code, rec.Header().Get("Cache-Control"))
	}
	var back contract.FireResponse
	if e := contract.DecodeBytes(rec.Body.Bytes(), &back); e != nil || back.RunID != "r1" {
		t.Errorf("decoding what WriteJSON wrote: %v, %+v", e, back)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil || len(raw) != 3 {
		t.Errorf("body %s", rec.Body.String())
	}
}
