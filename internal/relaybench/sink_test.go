package relaybench

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// checkFireDecoding fails unless decodeFire gives json.Unmarshal's result
// for b, and the NAS-layout decoder, when it takes b, gives it too.
func checkFireDecoding(t *testing.T, b []byte) {
	t.Helper()
	var want contract.FireRequest
	wantOK := json.Unmarshal(b, &want) == nil
	var got contract.FireRequest
	if ok := decodeFire(b, &got); ok != wantOK {
		t.Fatalf("%q: decoded %v, json.Unmarshal %v", b, ok, wantOK)
	}
	if wantOK && (!reflect.DeepEqual(got, want) || got.FireAt.Text() != want.FireAt.Text()) {
		t.Fatalf("%q: %+v, json.Unmarshal's %+v", b, got, want)
	}
	var nas contract.FireRequest
	if decodeNASFire(string(b), &nas) && (!wantOK || !reflect.DeepEqual(nas, want)) {
		t.Fatalf("%q: the NAS-layout decoder took it as %+v; json.Unmarshal %v, %+v", b, nas, wantOK, want)
	}
}

// fireSamples are bodies in and around the layout NAS writes.
var fireSamples = []string{
	`{"job_id":"ab12cd34","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"ab12cd34","fire_at":"2026-06-18T14:34:56+02:00","schedule_id":"sch_1","attempt":12}`,
	`{"job_id":"ab12cd34","fire_at":"2026-06-18T12:34:56.500Z","schedule_id":"sch_1","attempt":0}`,
	`{"job_id":"ab12cd34","fire_at":"2026-06-18t12:34:56z","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"ab12cd34","fire_at":"2026-02-30T12:34:56Z","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"ab12cd34","fire_at":"","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"a\"b","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"\u0061b","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":01}`,
	`{"job_id":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":-1}`,
	`{"job_id":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1.0}`,
	`{"job_id":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1234567890}`,
	`{"job_id":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1} `,
	`{"job_id":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1,"x":2}`,
	`{"fire_at":"2026-06-18T12:34:56Z","job_id":"ab","schedule_id":"sch_1","attempt":1}`,
	`{"JOB_ID":"ab","fire_at":"2026-06-18T12:34:56Z","schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"ab","fire_at":null,"schedule_id":"sch_1","attempt":1}`,
	`{"job_id":"ab"}`, `{}`, `null`, `[]`, ``,
}

func TestDecodeFireMatchesJSON(t *testing.T) {
	t.Parallel()
	for _, s := range fireSamples {
		checkFireDecoding(t, []byte(s))
	}
	var f contract.FireRequest
	if !decodeNASFire(fireSamples[0], &f) {
		t.Fatal("the NAS-layout decoder does not take the body NAS writes")
	}
	// The body as NAS marshals it.
	nas, err := json.Marshal(contract.FireRequest{JobID: "ab12cd34", FireAt: contract.NewTime(time.Now()), ScheduleID: "sch_01J", Attempt: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !decodeNASFire(string(nas), &f) {
		t.Fatalf("the NAS-layout decoder does not take %s", nas)
	}
	checkFireDecoding(t, nas)
}

// TestDecodeFireMatchesJSONOnMutations mutates NAS's bodies at random (a
// fixed seed) and compares with json.Unmarshal every time.
func TestDecodeFireMatchesJSONOnMutations(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(18, 2))
	pieces := []string{`"`, `\`, `{`, `}`, `,`, `:`, `0`, `9`, `.`, `-`, `+`, ` `, `Z`, `T`, "\x00", "\x80", `é`, `null`, `\u0041`, `"attempt":`}
	for range 20000 {
		s := fireSamples[rng.IntN(3)]
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(s) + 1)
			switch rng.IntN(3) {
			case 0:
				s = s[:i] + pieces[rng.IntN(len(pieces))] + s[i:]
			case 1:
				j := min(len(s), i+1+rng.IntN(4))
				s = s[:min(i, j)] + s[j:]
			default:
				j := min(len(s), i+rng.IntN(16))
				s = s[:j] + s[i:j] + s[j:]
			}
		}
		checkFireDecoding(t, []byte(s))
	}
}
