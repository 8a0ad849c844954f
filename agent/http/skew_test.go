package agenthttp_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/contract"
)

// A validly signed fire token whose only fault is that it is not valid yet
// is answered 425 too_early with Retry-After, not 401: nothing is claimed or
// run, and it is counted as too_early.
func TestFireTokenNotValidYetIs425(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, c := range fireauthtest.NotYetValid {
		t.Run(c.Name, func(t *testing.T) {
			f := fireFor("job-1", slot)
			token, body, err := c.Build(b.key, f)
			if err != nil {
				t.Fatal(err)
			}
			rec := b.post(t, token, body)
			if rec.Code != http.StatusTooEarly {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if e := decode[contract.Error](t, rec); e.Code != contract.CodeTooEarly {
				t.Fatalf("code %q, want %q", e.Code, contract.CodeTooEarly)
			}
			if n, err := strconv.Atoi(rec.Header().Get("Retry-After")); err != nil || n < 1 {
				t.Fatalf("Retry-After %q", rec.Header().Get("Retry-After"))
			}
			if rec.Header().Get("WWW-Authenticate") != "" {
				t.Fatal("a token only early is answered as an authentication failure")
			}
			b.untouched(t)
		})
	}
	wantSample(t, scrape(t, b.handler), `chronos_agent_fires_total{outcome="too_early"}`, float64(len(fireauthtest.NotYetValid)))
	wantSample(t, scrape(t, b.handler), `chronos_agent_fires_total{outcome="unauthorized"}`, 0)
}

// skew is a fixed clock skew estimate.
type skew float64

func (s skew) Seconds() float64 { return float64(s) }

// The clock skew estimate is a gauge, present only when the server has one.
func TestClockSkewGauge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, ok := sample(scrape(t, b.server), "chronos_agent_clock_skew_seconds"); ok {
		t.Fatal("a skew gauge without an estimate")
	}
	s := agenthttp.New(agenthttp.Config{Firer: b.rt, Verifier: allow{}, Logger: quiet, ClockSkew: skew(-120.5)})
	wantSample(t, scrape(t, s), "chronos_agent_clock_skew_seconds", -120.5)
}
