package agenthttp_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/apitest"
)

// TestFireSeedStyleBody sends the body the seed contract's NAS sends, with
// only job_id and fire_at (spaced as Python writes JSON). A token whose
// claims carry no schedule_id or attempt but bind that exact body is a fire;
// a body that adds what the token lacks, or a token that names what the
// body lacks, is refused with nothing run.
func TestFireSeedStyleBody(t *testing.T) {
	t.Parallel()
	seedBody := []byte(`{"job_id": "job-1", "fire_at": "` + contract.FormatTime(slot) + `"}`)
	seedToken := func(b *bundle, body []byte, edit func(tok *fireauthtest.Token)) string {
		t.Helper()
		f := fireFor("job-1", slot)
		f.Body = body
		tok := fireauthtest.NewToken(b.key, f)
		delete(tok.Claims, "schedule_id")
		delete(tok.Claims, "attempt")
		if edit != nil {
			edit(tok)
		}
		s, err := tok.Sign()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cases := []struct {
		name  string
		body  []byte
		edit  func(tok *fireauthtest.Token)
		want  int
		check func(t *testing.T, b *bundle)
	}{
		{name: "seed body, token without schedule_id and attempt", body: seedBody, want: http.StatusAccepted},
		{name: "token names a schedule_id the body lacks", body: seedBody,
			edit: func(tok *fireauthtest.Token) { tok.Claims["schedule_id"] = "sch_1" }, want: http.StatusUnauthorized},
		{name: "token names an attempt the body lacks", body: seedBody,
			edit: func(tok *fireauthtest.Token) { tok.Claims["attempt"] = 1 }, want: http.StatusUnauthorized},
		{name: "bh of another body", body: seedBody,
			edit: func(tok *fireauthtest.Token) { tok.Claims["bh"] = contract.BodyHash([]byte(`{"job_id":"job-1"}`)) }, want: http.StatusUnauthorized},
		{name: "bh missing", body: seedBody,
			edit: func(tok *fireauthtest.Token) { delete(tok.Claims, "bh") }, want: http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			rec := b.post(t, seedToken(b, tc.body, tc.edit), tc.body)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
			if tc.want != http.StatusAccepted {
				b.untouched(t)
				return
			}
			got := decode[contract.FireResponse](t, rec)
			if got.Status != contract.FireAccepted || got.JobID != "job-1" || got.RunID == "" {
				t.Fatalf("answer %+v", got)
			}
		})
	}
}

// TestFireWithoutProvider pins the answers of an agent on the built-in timer
// (no verifier): a call without a bearer token is 401 like anywhere else; a
// call with one is 503 with Retry-After, since the agent may be switched to
// the chronos provider; nothing runs either way.
func TestFireWithoutProvider(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		token  string
		status int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a token", "x.y.z", http.StatusServiceUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			firer := &countingFirer{}
			h := apitest.New(t, agenthttp.New(agenthttp.Config{Firer: firer, Logger: quiet}))
			f := fireFor("job-1", slot)
			req := httptest.NewRequest(http.MethodPost, contract.PathFire, bytes.NewReader(f.Body))
			req.Header.Set("Content-Type", "application/json")
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if tc.status == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			if firer.calls.Load() != 0 {
				t.Fatal("the firer was called")
			}
		})
	}
}

// countingFirer counts Fire calls and answers accepted.
type countingFirer struct{ calls atomic.Int32 }

func (c *countingFirer) Fire(context.Context, string, time.Time, agent.Trigger) (agent.FireResult, error) {
	c.calls.Add(1)
	return agent.FireResult{Status: agent.FireAccepted, RunID: "r"}, nil
}
