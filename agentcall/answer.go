package agentcall

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// Outcome kinds of a fire call.
const (
	// OutcomeDelivered: the agent took the fire (2xx, also duplicate/gone).
	OutcomeDelivered = "delivered"
	// OutcomeRejected: the agent refused it for good (400, 404, 410, 422,
	// any other 4xx but 401, 403, 408, 425 and 429; a redirect) or the
	// callback address is not allowed; the fire is dead-lettered at once.
	OutcomeRejected = "rejected"
	// OutcomeRetry: the agent could not take it now (5xx, 408, 425, 429, no
	// answer); the relay retries, honouring Retry-After.
	OutcomeRetry = "retry"
	// OutcomeRefused: the agent refused the fire token (401, 403). A key-set
	// race on the agent heals within a few retries, so the relay retries on
	// its ladder; once relay.retry.max_auth_attempts attempts were refused
	// the fire is dead-lettered (see FireResult.AtAttempt).
	OutcomeRefused = "refused"
)

// FireResult is what an agent's answer means for the relay.
type FireResult struct {
	Outcome     string
	HTTPStatus  int    // 0 when no answer was received
	AgentStatus string // the agent's `status`, when it sent one
	RunID       string // the agent's `run_id`, when it sent one
	// AgentError is the agent's `error` code, when it sent a plausible one.
	AgentError string
	Reason     string
	// ColdStart is true for connection refused or 503: the agent is waking.
	ColdStart  bool
	RetryAfter time.Duration
}

// AtAttempt settles a refused answer for the attempt-th delivery of a fire:
// below maxAuthAttempts it is retried, at or past it rejected with a reason
// that names the status, the agent's error code and the attempts. Other
// outcomes are returned as they are.
func (r FireResult) AtAttempt(attempt, maxAuthAttempts int) FireResult {
	return r.AtAttemptHint(attempt, maxAuthAttempts, "check its expected_audience, issuer and nas_jwks_url")
}

// AtAttemptHint is AtAttempt with the advice the final reason ends with
// (what to check on the agent for this kind of token).
func (r FireResult) AtAttemptHint(attempt, maxAuthAttempts int, hint string) FireResult {
	if r.Outcome != OutcomeRefused {
		return r
	}
	if attempt < maxAuthAttempts {
		r.Outcome = OutcomeRetry
		r.Reason = fmt.Sprintf("%s (the fire token was refused; attempt %d of at most %d)", r.Reason, attempt, maxAuthAttempts)
		return r
	}
	r.Outcome = OutcomeRejected
	r.Reason = fmt.Sprintf("%s: the agent refused the fire token %d times (relay.retry.max_auth_attempts); %s", r.Reason, attempt, hint)
	return r
}

// AgentDown reports whether a retried fire found its agent not answering
// (the relay's "agent down": it holds the agent's fires and probes it): no
// answer at all (connection refused, timeout, unreachable, a callback host
// that does not resolve), or an answer that says the agent cannot take fires
// now (503 waking or overloaded, 408, 425, 429). NAS's relay route answers
// those 503 agent_unavailable; an agent that answered another 5xx, or
// refused the fire token, is up: 502.
func (r FireResult) AgentDown() bool {
	switch r.HTTPStatus {
	case 0, http.StatusServiceUnavailable, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	}
	return r.ColdStart
}

// ClassifyAnswer is the one place that says what an agent's answer to a fire
// means (docs/operations.md has it as a table):
//
//	2xx                                   delivered (duplicate and gone too)
//	401, 403                              refused: retried on the ladder for at most
//	                                      relay.retry.max_auth_attempts attempts, then dead letter
//	503                                   retry, cold start (the agent is waking); agent down
//	408, 425, 429                         retry, honouring Retry-After; agent down
//	other 5xx                             retry, honouring Retry-After
//	3xx                                   rejected: redirects are not followed
//	400, 404, 410, 422, other 4xx, 1xx    rejected: dead letter at once
//
// A call that got no answer is classified by the caller: connection errors,
// timeouts and names that do not resolve retry (agent down), an address the
// SSRF guard refused is rejected. "Agent down" retries are answered 503
// agent_unavailable on the relay route (the relay holds the agent's fires
// and probes it, see relay.Queue.Down); the other retries 502.
func ClassifyAnswer(status int, retryAfter string, body []byte) FireResult {
	r := FireResult{HTTPStatus: status, RetryAfter: parseRetryAfter(retryAfter)}
	if status >= 200 && status < 300 {
		r.Outcome = OutcomeDelivered
		r.AgentStatus, r.RunID = fireAnswerFields(body)
		return r
	}
	answered := "agent answered " + strconv.Itoa(status)
	if r.AgentError = errorCode(body); r.AgentError != "" {
		answered += " " + r.AgentError
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		r.Outcome, r.Reason = OutcomeRefused, answered
	case status == http.StatusServiceUnavailable:
		r.Outcome, r.ColdStart, r.Reason = OutcomeRetry, true, answered
	case status >= 500, status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests:
		r.Outcome, r.Reason = OutcomeRetry, answered
	case status >= 300 && status < 400:
		r.Outcome, r.Reason = OutcomeRejected, "agent answered a redirect ("+strconv.Itoa(status)+"); redirects are not followed"
	default:
		r.Outcome, r.Reason = OutcomeRejected, answered
	}
	return r
}

// Limits on what of a delivered answer's `status` and `run_id` is kept.
const (
	maxAgentStatus = 64
	maxRunID       = 128
)

// fireAnswerFields returns the `status` and `run_id` of an agent's answer
// to a fire, truncated to maxAgentStatus and maxRunID bytes, as
// json.Unmarshal into a struct of the two reads them: empty when absent, not
// strings, or the body is not JSON. The common shape (see scanFireAnswer) is
// read without encoding/json and without copying a known status.
func fireAnswerFields(body []byte) (status, runID string) {
	if st, run, ok := scanFireAnswer(body); ok {
		return knownStatus(st[:min(len(st), maxAgentStatus)]), string(run[:min(len(run), maxRunID)])
	}
	var fr struct {
		Status string `json:"status"`
		RunID  string `json:"run_id"`
	}
	_ = json.Unmarshal(body, &fr)
	return truncate(fr.Status, maxAgentStatus), truncate(fr.RunID, maxRunID)
}

// knownStatus returns b as a string, the constant itself for the fire
// statuses agents answer.
func knownStatus(b []byte) string {
	for _, s := range [...]string{contract.FireAccepted, contract.FireDuplicate, contract.FireGone, contract.FireRefreshed} {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

// scanFireAnswer reads a body of the shape agents answer a fire with: one
// JSON object, white space around its tokens, whose keys and values are all
// strings of printable ASCII without escapes. It returns the last `status`
// and `run_id` values (keys matched case-insensitively), exactly what
// json.Unmarshal stores for them; ok is false for any other body (which
// then goes to encoding/json).
func scanFireAnswer(b []byte) (status, runID []byte, ok bool) {
	i := skipJSONSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return nil, nil, false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, nil, skipJSONSpace(b, i+1) == len(b)
	}
	for {
		key, j, okKey := plainJSONString(b, i)
		if !okKey {
			return nil, nil, false
		}
		i = skipJSONSpace(b, j)
		if i == len(b) || b[i] != ':' {
			return nil, nil, false
		}
		val, j, okVal := plainJSONString(b, skipJSONSpace(b, i+1))
		if !okVal {
			return nil, nil, false
		}
		switch {
		case strings.EqualFold(string(key), "status"):
			status = val
		case strings.EqualFold(string(key), "run_id"):
			runID = val
		}
		i = skipJSONSpace(b, j)
		switch {
		case i == len(b):
			return nil, nil, false
		case b[i] == ',':
			i = skipJSONSpace(b, i+1)
		case b[i] == '}':
			return status, runID, skipJSONSpace(b, i+1) == len(b)
		default:
			return nil, nil, false
		}
	}
}

// skipJSONSpace returns the index of the first byte at or after i that is
// not JSON white space.
func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// plainJSONString reads the JSON string at b[i] when it holds only
// printable ASCII and no escapes: its contents and the index after its
// closing quote.
func plainJSONString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// errorCode returns the `error` of an OAuth-style error body when it looks
// like a code (letters, digits, '_', '-', '.', at most 64 bytes): it goes
// into logs and the dead letter, so anything else is left out.
func errorCode(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error == "" || len(e.Error) > 64 {
		return ""
	}
	for _, c := range e.Error {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return ""
		}
	}
	return e.Error
}

// parseRetryAfter reads delta-seconds or an HTTP date; at most one hour.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	if d < 0 {
		d = 0
	}
	return min(d, time.Hour)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
