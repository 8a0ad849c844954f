package relaybench

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/contract"
)

// TestAppendAcceptedMatchesEncoder pins the sink's hand-written accepted
// answer to what json.Encoder writes for the same contract.FireResponse.
func TestAppendAcceptedMatchesEncoder(t *testing.T) {
	t.Parallel()
	ids := []string{"", "ab12cd34", "sch_01J2", "a\"b", `a\b`, "<&>", "tab\there", "é", "\x7f", "\xff", "\u2028"}
	for _, job := range ids {
		for _, run := range ids {
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(contract.FireResponse{Status: contract.FireAccepted, JobID: job, RunID: run}); err != nil {
				t.Fatal(err)
			}
			if got := appendAccepted(nil, job, run); string(got) != want.String() {
				t.Errorf("job %q run %q: %q, json.Encoder %q", job, run, got, want.String())
			}
		}
	}
	var dup bytes.Buffer
	if err := json.NewEncoder(&dup).Encode(contract.FireResponse{Status: contract.FireDuplicate}); err != nil {
		t.Fatal(err)
	}
	if string(duplicateBody) != dup.String() {
		t.Errorf("duplicate answer %q, json.Encoder %q", duplicateBody, dup.String())
	}
}

// TestSinkAnswersLikeAnAgent drives the sink's handler: a verified fire is
// accepted once and a duplicate after, a forged or missing token is 401, a
// bad body 400 and another path 404; only verified first arrivals count.
func TestSinkAnswersLikeAnAgent(t *testing.T) {
	t.Parallel()
	const issuer = "http://nas.test"
	key, err := fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	forger, err := fireauthtest.NewKey("ES256", "k1")
	if err != nil {
		t.Fatal(err)
	}
	jwks, err := fireauthtest.JWKS(key)
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(issuer, jwks, 2, slog.New(slog.DiscardHandler))
	t.Cleanup(s.close)
	fire := fireauthtest.NewFire(issuer, contract.Audience(instanceOf("a1")), time.Now(),
		contract.FireRequest{JobID: "ab12cd34", FireAt: contract.NewTime(time.Now().Truncate(time.Second)), ScheduleID: "sch_1", Attempt: 1})
	good, err := fireauthtest.Mint(key, fire)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := fireauthtest.Mint(forger, fire)
	if err != nil {
		t.Fatal(err)
	}
	path := "/agents/a1" + contract.PathFire
	tests := []struct {
		name   string
		path   string
		token  string
		body   []byte
		status int
		answer string
	}{
		{"forged", path, forged, fire.Body, http.StatusUnauthorized, `{"error":"invalid_token"}`},
		{"no token", path, "", fire.Body, http.StatusUnauthorized, `{"error":"invalid_token"}`},
		{"another agent's token", "/agents/a2" + contract.PathFire, good, fire.Body, http.StatusUnauthorized, `{"error":"invalid_token"}`},
		{"first", path, good, fire.Body, http.StatusAccepted, `{"status":"accepted","job_id":"ab12cd34","run_id":"sch_1"}` + "\n"},
		{"again", path, good, fire.Body, http.StatusOK, `{"status":"duplicate"}` + "\n"},
		{"not JSON", path, good, []byte(`{`), http.StatusBadRequest, "body\n"},
		{"too large", path, good, bytes.Repeat([]byte(" "), contract.DefaultMaxBodyBytes+1), http.StatusBadRequest, "body\n"},
		{"another path", "/agents/a1/api/other", good, fire.Body, http.StatusNotFound, "404 page not found\n"},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(http.MethodPost, tt.path, bytes.NewReader(tt.body))
		if tt.token != "" {
			req.Header.Set(contract.HeaderAuthorization, "Bearer "+tt.token)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != tt.status || rec.Body.String() != tt.answer {
			t.Errorf("%s: %d %q, want %d %q", tt.name, rec.Code, rec.Body.String(), tt.status, tt.answer)
		}
		isJSON := strings.HasPrefix(tt.answer, "{")
		if ct := rec.Header().Get(contract.HeaderContentType); isJSON && ct != contract.MediaTypeJSON {
			t.Errorf("%s: Content-Type %q, want %q", tt.name, ct, contract.MediaTypeJSON)
		}
	}
	if v, f, d := s.verified.Load(), s.failed.Load(), s.duplicates.Load(); v != 2 || f != 4 || d != 1 {
		t.Errorf("verified %d, failed %d, duplicates %d; want 2, 4, 1", v, f, d)
	}
	if lags, _ := s.results(); len(lags) != 1 {
		t.Errorf("%d first arrivals, want 1", len(lags))
	}
}
