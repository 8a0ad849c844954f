package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/browsertest"
)

// EnvUpdateScreenshots, set to 1, makes the dashboard tests write their
// 1280 px screenshots to docs/operator-dashboard.png and
// docs/agent-dashboard.png.
const EnvUpdateScreenshots = "CHRONOS_UPDATE_SCREENSHOTS"

// checkNarrow screenshots the page at 390 px wide to path, fails t when
// what is shown (the page, a view) scrolls sideways there, and sets the
// viewport back to 1280 px.
func checkNarrow(t *testing.T, browser *browsertest.Browser, path, what string) {
	t.Helper()
	browser.Screenshot(path, 390, 844)
	if scroll := browsertest.Eval[int](browser, `document.documentElement.scrollWidth`); scroll > 390 {
		t.Errorf("at 390 px %s is %d px wide: it scrolls sideways", what, scroll)
	}
	browser.Viewport(1280, 900)
}

// checkLayout screenshots the page at 1280 and at 390 px wide, fails t when
// the narrow page scrolls sideways, and sets the viewport back to 1280 px.
// With EnvUpdateScreenshots=1 the wide screenshot replaces docs/<name>.png.
func checkLayout(t *testing.T, browser *browsertest.Browser, name string) {
	t.Helper()
	shots := t.TempDir()
	wide := filepath.Join(shots, name+"-1280.png")
	browser.Screenshot(wide, 1280, 900)
	checkNarrow(t, browser, filepath.Join(shots, name+"-390.png"), "the page")
	if os.Getenv(EnvUpdateScreenshots) == "1" {
		data, err := os.ReadFile(wide)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repoRoot, "docs", name+".png"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// fireRecorder is an agent's fire endpoint that answers every fire with the
// status it is set to and records the fires it answered with 2xx.
type fireRecorder struct {
	mu        sync.Mutex
	status    int
	delivered []contract.FireRequest
	arrived   chan struct{} // gets a value per fire answered 2xx
}

func (f *fireRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var fire contract.FireRequest
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	_ = json.Unmarshal(body, &fire)
	f.mu.Lock()
	status := f.status
	if status/100 == 2 {
		f.delivered = append(f.delivered, fire)
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if status/100 == 2 {
		_, _ = w.Write([]byte(`{"status":"accepted","run_id":"run-1"}`))
		f.arrived <- struct{}{}
		return
	}
	_, _ = w.Write([]byte(`{"error":"not_found","error_description":"no such job"}`))
}

func (f *fireRecorder) answer(status int) {
	f.mu.Lock()
	f.status = status
	f.mu.Unlock()
}

// TestOperatorDashboardInABrowser logs in on the operator dashboard of a
// real NAS process in headless Chromium, sees the agent with its armed count
// and a fire the agent refused in the dead letter, replays it with the
// page's button and sees it leave the dead letter while the agent, now
// answering 200, gets it; then disables and enables the agent with the
// page's kill switch.
func TestOperatorDashboardInABrowser(t *testing.T) {
	t.Parallel()
	browser := browsertest.New(t)
	const agentID, instanceID = "agent-reports", "inst-reports-1"
	dir := t.TempDir()
	nasPort, relayPort := freePort(t), freePort(t)
	publicURL := fmt.Sprintf("http://127.0.0.1:%d", nasPort)
	internalURL := fmt.Sprintf("http://127.0.0.1:%d", relayPort)
	mustChronos(t, dir, nil, "keys", "generate", "--out", "keys", "--activate")
	writeFile(t, dir, "relay-secrets", "whsec_"+base64.StdEncoding.EncodeToString([]byte(randomToken(24)))+"\n")
	opToken, agentToken := randomToken(24), randomToken(24)
	writeFile(t, dir, "operator-token", opToken+"\n")
	sum := sha256.Sum256([]byte(agentToken))
	writeFile(t, dir, "agents.yaml", fmt.Sprintf("- agent_id: %s\n  instance_id: %s\n  token_sha256: %s\n", agentID, instanceID, hex.EncodeToString(sum[:])))
	writeFile(t, dir, "nas.yaml", fmt.Sprintf(`listen: 127.0.0.1:%d
relay_listen: 127.0.0.1:%d
public_url: %s
store: memory
signing_keys_dir: keys
relay:
  secrets_file: relay-secrets
  dispatchers: 1
agents_file: agents.yaml
operator_token_file: operator-token
allow_private_callbacks: true
`, nasPort, relayPort, publicURL))
	agent := &fireRecorder{status: http.StatusNotFound, arrived: make(chan struct{}, 16)}
	agentSrv := httptest.NewServer(agent)
	t.Cleanup(agentSrv.Close)
	nas := startProc(t, "nas", dir, nil, "nas", "--config", "nas.yaml")
	waitReady(t, nas, publicURL+"/readyz", 30*time.Second)

	// The agent arms two jobs: one due in a moment (its fire is answered
	// 404 and dead-lettered), one in an hour (it stays armed).
	provisionStatus := func(job string, at time.Time) (int, []byte) {
		t.Helper()
		at = at.UTC().Truncate(time.Second)
		body, _ := json.Marshal(contract.ProvisionRequest{JobID: job, FireAt: contract.NewTime(at), AgentCallbackURL: agentSrv.URL + "/fire",
			DedupKey: job + ":" + at.Format(time.RFC3339)})
		req, _ := http.NewRequest(http.MethodPost, publicURL+contract.PathProvision, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agentToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("provision %s: %v", job, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, answer
	}
	provision := func(job string, at time.Time) {
		t.Helper()
		if code, answer := provisionStatus(job, at); code != http.StatusOK {
			t.Fatalf("provision %s: %d %s", job, code, answer)
		}
	}
	provision("hourly.sync", time.Now().Add(time.Hour))
	provision("nightly.report", time.Now().Add(time.Second))

	browser.Open(internalURL + "/")
	browser.WaitVisible(`[data-test="login"]`)
	browser.Fill(`[data-test="token"]`, "not-the-token")
	browser.Click(`[data-test="login-submit"]`)
	browser.WaitVisible(`[data-test="login-failed"]`)
	browser.Fill(`[data-test="token"]`, opToken)
	browser.Click(`[data-test="login-submit"]`)
	browser.WaitVisible(`[data-test="dashboard"]`)

	browser.WaitText(`[data-test="agents"]`, agentID)
	browser.WaitText(`[data-test="dead-entry"]`, "nightly.report")
	// Once the fire is dead-lettered, the agent holds one armed fire.
	browser.WaitExact(`[data-test="agents"] tbody td.num`, "1")
	browser.WaitExact(`[data-test="armed-total"]`, "1")
	browser.WaitText(`[data-test="dead-entry"]`, "agent answered 404")
	browser.WaitExact(`[data-test="dead-total"]`, "1")
	browser.WaitText(`[data-test="deliveries"]`, "rejected")
	browser.WaitText(`[data-test="unarmed"]`, "Every job is armed")

	checkLayout(t, browser, "operator-dashboard")

	agent.answer(http.StatusOK)
	browser.Click(`[data-test="replay"]`)
	browser.WaitGone(`[data-test="dead-entry"]`)
	browser.WaitText(`[data-test="dead-letter"]`, "The dead letter is empty.")
	select {
	case <-agent.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the replayed fire never reached the agent")
	}
	agent.mu.Lock()
	delivered := agent.delivered
	agent.mu.Unlock()
	if len(delivered) != 1 || delivered[0].JobID != "nightly.report" {
		t.Fatalf("delivered %+v, want the replayed nightly.report", delivered)
	}
	browser.WaitText(`[data-test="deliveries"]`, "delivered")
	browser.WaitExact(`[data-test="dead-total"]`, "0")

	// The kill switch: the agent's row has a Disable button; once pressed
	// the agent shows disabled under flow control and NAS refuses its calls
	// with 403 invalid_client; Enable serves it again.
	browser.WaitText(`[data-test="agent-flows"]`, "Every agent delivers freely")
	browser.Click(`[data-test="disable-agent"]`)
	browser.WaitText(`[data-test="agent-flow"]`, agentID)
	browser.WaitText(`[data-test="agent-flow"]`, "disabled")
	if code, body := provisionStatus("later.job", time.Now().Add(2*time.Hour)); code != http.StatusForbidden || !bytes.Contains(body, []byte(contract.CodeInvalidClient)) {
		t.Fatalf("a disabled agent's provision: %d %s, want 403 invalid_client", code, body)
	}
	browser.Click(`[data-test="enable-agent"]`)
	browser.WaitGone(`[data-test="agent-flow"]`)
	browser.WaitVisible(`[data-test="disable-agent"]`)
	provision("later.job", time.Now().Add(2*time.Hour))

	// Logging out clears the cookie: a fresh load asks for the token again.
	browser.Click(`[data-test="logout"]`)
	browser.WaitVisible(`[data-test="login"]`)
	browser.Open(internalURL + "/ui/")
	browser.WaitVisible(`[data-test="login"]`)
}
