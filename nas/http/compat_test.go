package nashttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
)

// seedClient speaks only the seed contract's wire: it sends exactly the
// hop-1 bodies, reads schedule_id and armed, and reads `error` as a string.
type seedClient struct {
	t      *testing.T
	portal string
	token  string
	http   *http.Client
}

func (c *seedClient) post(path string, body map[string]any) (int, map[string]any) {
	c.t.Helper()
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", c.portal+path, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	return c.do(req)
}

func (c *seedClient) do(req *http.Request) (int, map[string]any) {
	c.t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s: not a JSON object: %q", req.URL.Path, raw)
	}
	return resp.StatusCode, out
}

// seedVerifier checks a fire token as the seed's agent does (PyJWT with
// algorithms RS256/RS384/RS512/ES256/ES384, exp and aud required, iss equal
// to the portal URL, purpose cron_fire) and uses only job_id from the body.
func seedVerifier(t *testing.T, portal, audience string) func(string, []byte) (*contract.FireClaims, error) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kf, err := keyfunc.NewDefaultCtx(ctx, []string{portal + contract.PathJWKS})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		keys, err := kf.Storage().KeyReadAll(ctx)
		return err == nil && len(keys) > 0
	})
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "ES256", "ES384"}),
		jwt.WithExpirationRequired(), jwt.WithAudience(audience), jwt.WithIssuer(portal), jwt.WithLeeway(30*time.Second))
	return func(token string, body []byte) (*contract.FireClaims, error) {
		claims := jwt.MapClaims{}
		if _, err := p.ParseWithClaims(token, claims, kf.Keyfunc); err != nil {
			return nil, err
		}
		if claims["purpose"] != "cron_fire" {
			return nil, errors.New("purpose")
		}
		var b map[string]any
		if err := json.Unmarshal(body, &b); err != nil || b["job_id"] == "" {
			return nil, errors.New("missing job_id")
		}
		var c contract.FireClaims
		if _, _, err := jwt.NewParser().ParseUnverified(token, &c); err != nil {
			return nil, err
		}
		return &c, nil
	}
}

// TestNASSeedCompatibility runs an agent written to the seed's contract
// against NAS signing with each algorithm such an agent's verifier accepts.
func TestNASSeedCompatibility(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{nas.AlgES256, nas.AlgRS256} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			testSeedCompatibility(t, alg)
		})
	}
}

func testSeedCompatibility(t *testing.T, alg string) {
	l := startLive(t, alg, relay.RetryPolicy{Base: 10 * time.Millisecond, MaxAttempts: 3})
	agent := newFakeAgentVerifying(t, seedVerifier(t, l.publicURL, contract.Audience(instanceA)))
	c := &seedClient{t: t, portal: l.publicURL, token: tokenA, http: l.client}

	// Python's isoformat: microseconds and a +00:00 offset.
	fireAt := time.Now().Add(300*time.Millisecond).UTC().Format("2006-01-02T15:04:05.000000") + "+00:00"
	status, out := c.post(contract.PathProvision, map[string]any{
		"job_id": "ab12cd34", "fire_at": fireAt, "agent_callback_url": agent.URL(), "dedup_key": "ab12cd34:" + fireAt,
	})
	sch, _ := out["schedule_id"].(string)
	if status != 200 || sch == "" || out["armed"] != true {
		t.Fatalf("provision: %d %v", status, out)
	}
	// Re-arming the same fire is idempotent.
	_, again := c.post(contract.PathProvision, map[string]any{
		"job_id": "ab12cd34", "fire_at": fireAt, "agent_callback_url": agent.URL(), "dedup_key": "ab12cd34:" + fireAt,
	})
	if again["schedule_id"] != sch {
		t.Fatalf("re-provision changed the schedule id: %v", again)
	}
	req, _ := http.NewRequest("GET", l.publicURL+contract.PathList, nil)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	status, out = c.do(req)
	armed, _ := out["armed"].([]any)
	if status != 200 || len(armed) != 1 || armed[0].(map[string]any)["job_id"] != "ab12cd34" {
		t.Fatalf("list: %d %v", status, out)
	}
	// The fire arrives with an ES256 token the seed verifier accepts.
	f := waitFire(t, agent, 3*time.Second)
	if f.Body.JobID != "ab12cd34" || f.Body.ScheduleID != sch {
		t.Fatalf("fire %+v", f.Body)
	}
	if bad := agent.rejected(); len(bad) > 0 {
		t.Fatalf("the seed verifier refused NAS's token: %v", bad)
	}
	// Cancel answers {"ok": true}, also for an unknown job.
	for _, job := range []string{"other", "ab12cd34"} {
		if status, out := c.post(contract.PathCancel, map[string]any{"job_id": job}); status != 200 || out["ok"] != true {
			t.Fatalf("cancel %s: %d %v", job, status, out)
		}
	}
	// An unprovisioned agent reads `error` as a string.
	stranger := &seedClient{t: t, portal: l.publicURL, token: "not-provisioned", http: l.client}
	status, out = stranger.post(contract.PathProvision, map[string]any{
		"job_id": "x", "fire_at": fireAt, "agent_callback_url": agent.URL(), "dedup_key": "x:" + fireAt,
	})
	if code, ok := out["error"].(string); status != 403 || !ok || code != "invalid_client" {
		t.Fatalf("stranger: %d %v", status, out)
	}
}
