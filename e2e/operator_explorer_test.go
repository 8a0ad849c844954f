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
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/browsertest"
	"github.com/chronoscron/chronos/internal/redistest"
)

// explorerAgents is how many agents the explorer test's agents file lists:
// more than a page of the agents table (25).
const explorerAgents = 30

// TestOperatorExplorerInABrowser runs two NAS processes on one Redis with
// thirty agents: agent-00 holds 30 armed jobs and gets fires (one of them
// refused, so dead-lettered), agent-01 is asleep (its callback refuses
// connections), agent-02 is slow (answers after 1.5 s), agent-03 … get a
// fire each, the rest hold nothing. In headless Chromium it checks that
// both NAS processes' dashboards show the same delivered count, drives the
// charts (drawn, hour and day), the agents table (search, paging, an agent
// with no armed fire listed, the asleep one probing), the processes, a
// stopped instance's Start button, and an agent's page (armed fires next
// first, paged and searched by job; its recent deliveries and dead letter).
func TestOperatorExplorerInABrowser(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	browser := browsertest.New(t)
	dir := t.TempDir()
	mustChronos(t, dir, nil, "keys", "generate", "--out", "keys", "--activate")
	writeFile(t, dir, "relay-secrets", "whsec_"+base64.StdEncoding.EncodeToString([]byte(randomToken(24)))+"\n")
	opToken := randomToken(24)
	writeFile(t, dir, "operator-token", opToken+"\n")
	tokens := map[string]string{}
	var agentsFile strings.Builder
	for i := range explorerAgents {
		id := fmt.Sprintf("agent-%02d", i)
		tokens[id] = randomToken(24)
		sum := sha256.Sum256([]byte(tokens[id]))
		fmt.Fprintf(&agentsFile, "- agent_id: %s\n  instance_id: inst-%02d\n  token_sha256: %s\n", id, i, hex.EncodeToString(sum[:]))
	}
	writeFile(t, dir, "agents.yaml", agentsFile.String())

	// One fake agent server for all of them: /slow/ answers after 1.5 s,
	// the job reject.me is refused 404 (dead-lettered), the rest accepted.
	agentSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var fire contract.FireRequest
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		_ = json.Unmarshal(body, &fire)
		if strings.HasPrefix(r.URL.Path, "/slow/") {
			time.Sleep(1500 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		if fire.JobID == "reject.me" {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"not_found","error_description":"no such job"}`))
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"status":"accepted","job_id":"` + fire.JobID + `","run_id":"run-1"}`))
	}))
	t.Cleanup(agentSrv.Close)
	asleep := fmt.Sprintf("http://127.0.0.1:%d/fire", freePort(t)) // nothing listens there

	type nasProc struct{ public, internal string }
	startNAS := func(name string) nasProc {
		nasPort, relayPort := freePort(t), freePort(t)
		n := nasProc{public: fmt.Sprintf("http://127.0.0.1:%d", nasPort), internal: fmt.Sprintf("http://127.0.0.1:%d", relayPort)}
		writeFile(t, dir, name+".yaml", fmt.Sprintf(`listen: 127.0.0.1:%d
relay_listen: 127.0.0.1:%d
public_url: %s
store: %s/0?prefix=explorer
signing_keys_dir: keys
relay:
  secrets_file: relay-secrets
  dispatchers: 1
agents_file: agents.yaml
operator_token_file: operator-token
allow_private_callbacks: true
`, nasPort, relayPort, n.public, srv.URL()))
		p := startProc(t, name, dir, nil, "nas", "--config", name+".yaml")
		waitReady(t, p, n.public+"/readyz", 30*time.Second)
		return n
	}
	nasA, nasB := startNAS("nas-a"), startNAS("nas-b")

	provision := func(agent, job, callback string, at time.Time) {
		t.Helper()
		at = at.UTC().Truncate(time.Second)
		body, _ := json.Marshal(contract.ProvisionRequest{JobID: job, FireAt: contract.NewTime(at), AgentCallbackURL: callback,
			DedupKey: job + ":" + at.Format(time.RFC3339)})
		req, _ := http.NewRequest(http.MethodPost, nasA.public+contract.PathProvision, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokens[agent])
		req.Header.Set("Content-Type", "application/json")
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("provision %s/%s: %v", agent, job, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("provision %s/%s: %d %s", agent, job, resp.StatusCode, answer)
		}
	}
	soon := time.Now().Add(2 * time.Second)
	for i := range 30 {
		provision("agent-00", fmt.Sprintf("job-%02d", i), agentSrv.URL+"/a/fire", time.Now().Add(time.Duration(i+1)*37*time.Minute))
	}
	provision("agent-00", "now.report", agentSrv.URL+"/a/fire", soon)
	provision("agent-00", "reject.me", agentSrv.URL+"/a/fire", soon)
	provision("agent-01", "sleepy", asleep, soon)
	provision("agent-02", "slow.job", agentSrv.URL+"/slow/fire", soon)
	const quick = 8 // agents 03 … 10 get one fire each
	for i := 3; i < 3+quick; i++ {
		provision(fmt.Sprintf("agent-%02d", i), "tick", agentSrv.URL+"/a/fire", soon)
	}
	wantDelivered := fmt.Sprint(1 + 1 + quick) // now.report, slow.job and the quick ones

	login := func(base string) {
		t.Helper()
		browser.Open(base + "/ui")
		browser.WaitVisible(`[data-test="login"]`)
		browser.Fill(`[data-test="token"]`, opToken)
		browser.Click(`[data-test="login-submit"]`)
		browser.WaitVisible(`[data-test="dashboard"]`)
	}
	delivered := func() string {
		return browsertest.Eval[string](browser, `document.querySelector('[data-test="history-totals"]').dataset.delivered || ""`)
	}
	waitDelivered := func(what string) {
		t.Helper()
		eventually(t, 60*time.Second, what+" to show "+wantDelivered+" delivered", func() (bool, string) {
			got := delivered()
			return got == wantDelivered, "shows " + got
		})
	}

	// The second NAS process's dashboard shows what every dispatcher
	// delivered, the first's alike: both read the store.
	login(nasB.internal)
	waitDelivered("NAS B's dashboard")
	armedB := browser.Text(`[data-test="armed-total"]`)
	// The session cookie (signed with the operator token both share) logs
	// the browser in on NAS A too.
	browser.Open(nasA.internal + "/ui")
	browser.WaitVisible(`[data-test="dashboard"]`)
	waitDelivered("NAS A's dashboard")
	browser.WaitExact(`[data-test="armed-total"]`, armedB)

	// Their routes agree point by point: the delivered fires of every
	// minute, the fires due in each coming hour, each agent's armed count.
	opGet := func(base, path string, into any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+opToken)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s%s: %v", base, path, err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s%s: %d %v", base, path, resp.StatusCode, err)
		}
	}
	same := func() (bool, string) {
		var ha, hb contract.OperatorHistory
		var aa, ab contract.OperatorAgents
		opGet(nasA.internal, contract.PathOperatorHistory, &ha)
		opGet(nasB.internal, contract.PathOperatorHistory, &hb)
		opGet(nasA.internal, contract.PathOperatorAgents+"?limit=100", &aa)
		opGet(nasB.internal, contract.PathOperatorAgents+"?limit=100", &ab)
		delivered := func(h contract.OperatorHistory) string {
			var b strings.Builder
			for _, p := range h.Points {
				fmt.Fprintf(&b, "%s=%d ", p.At.Format("15:04"), p.Outcomes["delivered"])
			}
			return b.String()
		}
		armed := func(a contract.OperatorAgents) string {
			var b strings.Builder
			for _, x := range a.Agents {
				fmt.Fprintf(&b, "%s:%d ", x.AgentID, x.Armed)
			}
			return b.String()
		}
		da, db := delivered(ha), delivered(hb)
		return da == db && fmt.Sprint(ha.Due) == fmt.Sprint(hb.Due) && armed(aa) == armed(ab) && aa.Total == explorerAgents,
			fmt.Sprintf("A: %s due %v agents %s\nB: %s due %v agents %s", da, ha.Due, armed(aa), db, hb.Due, armed(ab))
	}
	eventually(t, 30*time.Second, "NAS A and B to answer the same history and agents", same)

	// The charts are drawn by the page: bars of delivered fires, the lag
	// lines, the dead letter, the fires due in the next 24 hours.
	// search types v into the search field sel, emptied first.
	search := func(sel, v string) {
		t.Helper()
		browsertest.Eval[bool](browser, `(() => { document.querySelector('`+sel+`').value = ""; return true })()`)
		browser.Fill(sel, v)
	}
	bars := func(chart string) int {
		return browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="`+chart+`"] rect.bar').length`)
	}
	eventually(t, 30*time.Second, "the charts to be drawn", func() (bool, string) {
		d, f, due := bars("chart-deliveries"), bars("chart-failures"), bars("chart-due")
		lines := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="chart-lag"] path.line').length`)
		return d > 0 && f > 0 && due > 0 && lines == 2, fmt.Sprintf("deliveries %d bars, failures %d, due %d, lag %d lines", d, f, due, lines)
	})
	browser.Click(`[data-test="window-day"]`)
	browser.WaitVisible(`[data-test="window-day"].on`)
	browser.WaitText(`#per-deliveries`, "per 10 min")
	if bars("chart-deliveries") == 0 {
		t.Error("the day's chart has no bars")
	}

	// Every agent is listed, those with no armed fire too; the asleep one
	// is probed; the processes of both NAS are alive.
	browser.WaitText(`[data-test="agents-range"]`, "1–25 of 30")
	browser.WaitText(`[data-test="agents"]`, "agent-24")
	browser.WaitText(`[data-test="processes"]`, "nas")
	eventually(t, 30*time.Second, "both NAS processes listed", func() (bool, string) {
		n := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="process"]').length`)
		return n == 2, fmt.Sprintf("%d processes", n)
	})
	browser.WaitText(`[data-test="agents"]`, "probing")
	browser.Click(`[data-test="window-hour"]`)
	browser.WaitVisible(`[data-test="window-hour"].on`)
	browser.WaitText(`[data-test="lag-store"]`, " / ")
	checkLayout(t, browser, "operator-explorer")
	browser.Click(`[data-test="agents-next"]`)
	browser.WaitText(`[data-test="agents-range"]`, "26–30 of 30")
	browser.WaitText(`[data-test="agents"]`, "agent-29")
	browser.Click(`[data-test="agents-prev"]`)
	browser.WaitText(`[data-test="agents-range"]`, "1–25 of 30")
	search(`[data-test="agent-search"]`, "agent-2")
	browser.WaitText(`[data-test="agents-range"]`, "1–10 of 10")

	// A stopped instance has Start beside it.
	stop, _ := http.NewRequest(http.MethodPost, nasA.internal+"/api/operator/instances/inst-29/stop", nil)
	stop.Header.Set("Authorization", "Bearer "+opToken)
	resp, err := httpClient.Do(stop)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stop inst-29: %v %v", err, resp)
	}
	resp.Body.Close()
	browser.WaitText(`[data-test="stopped"]`, "inst-29")
	browser.Click(`[data-test="start-instance"]`)
	browser.WaitText(`[data-test="stopped"]`, "No instance is stopped.")

	// Drill down to agent-00: its armed fires next first, paged, searched.
	search(`[data-test="agent-search"]`, "agent-00")
	browser.WaitText(`[data-test="agents-range"]`, "1–1 of 1")
	browser.Click(`[data-test="agent-link"]`)
	browser.WaitVisible(`[data-test="agent-view"]`)
	browser.WaitExact(`[data-test="agent-title"]`, "agent-00")
	browser.WaitText(`[data-test="armed-range"]`, "1–25 of 30")
	browser.WaitText(`[data-test="armed-fire"]`, "job-00") // the next fire comes first
	browser.WaitText(`[data-test="agent-recent"]`, "now.report")
	browser.WaitText(`[data-test="agent-recent"]`, "delivered")
	browser.WaitText(`[data-test="agent-dead"]`, "reject.me")
	checkLayout(t, browser, "operator-agent")
	browser.Click(`[data-test="armed-next"]`)
	browser.WaitText(`[data-test="armed-range"]`, "26–30 of 30")
	browser.WaitText(`[data-test="armed-fire"]`, "job-25")

	// A job's name narrows every table to it: reject.me is not armed, has
	// one attempt and a dead letter. Its dead letter replays from the page:
	// reject.me is armed again, due now, the agent refuses it again and it
	// is back in the dead letter, with a second attempt listed.
	browser.Click(`[data-test="agent-dead-entry"] [data-test="job-link"]`)
	browser.WaitText(`[data-test="agent-armed-list"]`, "No armed job matches.")
	eventually(t, 10*time.Second, "the recent deliveries narrowed to reject.me", func() (bool, string) {
		n := browsertest.Eval[int](browser, `document.querySelectorAll('[data-test="recent-delivery"]').length`)
		return n == 1, fmt.Sprintf("%d rows", n)
	})
	browser.Click(`[data-test="agent-replay"]`)
	eventually(t, 30*time.Second, "a second attempt of reject.me", func() (bool, string) {
		n := browsertest.Eval[int](browser, `Array.from(document.querySelectorAll('[data-test="recent-delivery"]')).filter((tr) => tr.textContent.includes("reject.me")).length`)
		return n == 2, fmt.Sprintf("%d attempts listed", n)
	})
	browser.WaitText(`[data-test="agent-dead-entry"]`, "reject.me")
	search(`[data-test="armed-search"]`, "JOB-07")
	browser.WaitText(`[data-test="armed-range"]`, "1–1 of 1")
	browser.WaitText(`[data-test="armed-fire"]`, "job-07")
	browser.WaitText(`[data-test="agent-dead"]`, "No dead letter of a matching job.")

	// The asleep agent's page says it is probed; back to every agent.
	browser.Open(nasA.internal + "/ui/#agent/agent-01")
	browser.WaitExact(`[data-test="agent-title"]`, "agent-01")
	browser.WaitText(`[data-test="agent-state"]`, "probing")
	browser.WaitText(`[data-test="agent-recent"]`, "retry")
	browser.Click(`[data-test="back"]`)
	browser.WaitVisible(`[data-test="history"]`)

	// NAS B's dashboard, logged in a moment ago, still shows the same
	// delivered count.
	browser.Open(nasB.internal + "/ui")
	browser.WaitVisible(`[data-test="dashboard"]`)
	waitDelivered("NAS B's dashboard again")
	if os.Getenv(EnvUpdateScreenshots) == "1" {
		for _, name := range []string{"operator-explorer", "operator-agent"} {
			if _, err := os.Stat(filepath.Join(repoRoot, "docs", name+".png")); err != nil {
				t.Errorf("screenshot %s not written: %v", name, err)
			}
		}
	}
}
