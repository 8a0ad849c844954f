package e2e

import (
	"bytes"
	"crypto/rand"
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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
)

// Identity of the agent every system test runs.
const (
	agentID    = "agent-1"
	instanceID = "inst-1"
)

// systemOptions shape a system.
type systemOptions struct {
	// Redis runs NAS on the shared throwaway redis-server (with a key prefix
	// of its own); otherwise the embedded engine.
	Redis bool
	// Relays is the number of `chronos relay` processes; with none, NAS runs
	// one dispatcher itself.
	Relays int
	// Agents is the number of `chronos agent serve` replicas sharing one
	// home. With more than one, NAS calls them through one address that
	// spreads calls over the replicas (as a load balancer would).
	Agents int
	// KeyCheck is NAS's key_check_interval (default 30s).
	KeyCheck time.Duration
}

// system is NAS, relays and agents started as processes in one directory
// holding their config files, keys and secrets.
type system struct {
	t   *testing.T
	dir string

	publicURL, internalURL string
	callbackURL            string
	home                   string
	opToken, agentToken    string

	nas    *proc
	relays []*proc
	agents []*proc
	// agentURLs are the replicas' own base URLs.
	agentURLs []string
	proxy     *spreadProxy
}

// randomToken returns n random bytes, URL-safe base64.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// newSystem writes the configs and starts every process, waiting for each to
// be ready.
func newSystem(t *testing.T, o systemOptions) *system {
	t.Helper()
	s := &system{t: t, dir: t.TempDir()}
	s.home = filepath.Join(s.dir, "agent-home")
	nasPort, relayPort := freePort(t), freePort(t)
	s.publicURL = fmt.Sprintf("http://127.0.0.1:%d", nasPort)
	s.internalURL = fmt.Sprintf("http://127.0.0.1:%d", relayPort)

	mustChronos(t, s.dir, nil, "keys", "generate", "--out", "keys", "--activate")
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	writeFile(t, s.dir, "relay-secrets", "whsec_"+base64.StdEncoding.EncodeToString(secret)+"\n")
	s.opToken, s.agentToken = randomToken(24), randomToken(24)
	writeFile(t, s.dir, "operator-token", s.opToken+"\n")
	writeFile(t, s.dir, "agent-token", s.agentToken+"\n")
	sum := sha256.Sum256([]byte(s.agentToken))
	writeFile(t, s.dir, "agents.yaml", fmt.Sprintf("- agent_id: %s\n  instance_id: %s\n  token_sha256: %s\n", agentID, instanceID, hex.EncodeToString(sum[:])))

	store := "memory"
	if o.Redis {
		store = redistest.URL(t) + "/0?prefix=" + redistest.Prefix(t)
	}
	dispatchers := 0
	if o.Relays == 0 {
		dispatchers = 1
	}
	keyCheck := o.KeyCheck
	if keyCheck == 0 {
		keyCheck = 30 * time.Second
	}
	writeFile(t, s.dir, "nas.yaml", fmt.Sprintf(`listen: 127.0.0.1:%d
relay_listen: 127.0.0.1:%d
public_url: %s
store: %q
signing_keys_dir: keys
key_check_interval: %s
relay:
  secrets_file: relay-secrets
  dispatchers: %d
agents_file: agents.yaml
operator_token_file: operator-token
allow_private_callbacks: true
`, nasPort, relayPort, s.publicURL, store, keyCheck, dispatchers))

	s.nas = startProc(t, "nas", s.dir, nil, "nas", "--config", "nas.yaml")
	waitReady(t, s.nas, s.publicURL+"/readyz", 30*time.Second)
	for i := range o.Relays {
		r := startProc(t, fmt.Sprintf("relay-%d", i+1), s.dir, nil, "relay", "--config", "nas.yaml")
		s.relays = append(s.relays, r)
	}

	n := max(o.Agents, 1)
	for range n {
		s.agentURLs = append(s.agentURLs, fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
	}
	s.callbackURL = s.agentURLs[0]
	if n > 1 {
		s.proxy = newSpreadProxy(t, s.agentURLs)
		s.callbackURL = s.proxy.URL()
	}
	for i, u := range s.agentURLs {
		name := fmt.Sprintf("agent-%d.yaml", i+1)
		writeFile(t, s.dir, name, s.agentConfig(strings.TrimPrefix(u, "http://")))
		a := startProc(t, fmt.Sprintf("agent-%d", i+1), s.dir, nil, "agent", "serve", "--config", name)
		s.agents = append(s.agents, a)
	}
	for i, a := range s.agents {
		waitReady(t, a, s.agentURLs[i]+"/readyz", 30*time.Second)
	}
	return s
}

// agentConfig is the agent.yaml of a replica listening on addr.
func (s *system) agentConfig(addr string) string {
	return fmt.Sprintf(`home: %s
listen: %s
cron:
  provider: chronos
  chronos:
    portal_url: %s
    callback_url: %s
    expected_audience: agent:%s
    nas_jwks_url: %s/.well-known/jwks.json
    access_token_file: agent-token
`, s.home, addr, s.publicURL, s.callbackURL, instanceID, s.publicURL)
}

// cli runs a chronos command in the system's directory.
func (s *system) cli(args ...string) cliResult {
	s.t.Helper()
	return chronos(s.t, s.dir, nil, args...)
}

// mustCLI runs a chronos command that must succeed and returns its stdout.
func (s *system) mustCLI(args ...string) string {
	s.t.Helper()
	return mustChronos(s.t, s.dir, nil, args...)
}

// addJob adds a shell job through the CLI with the first agent's config and
// returns its id.
func (s *system) addJob(id, schedule string, extra ...string) string {
	s.t.Helper()
	args := []string{"jobs", "add", "--config", "agent-1.yaml", "--id", id, "--schedule", schedule}
	args = append(args, extra...)
	args = append(args, "--", "sh", "-c", "echo $CHRONOS_JOB_ID $CHRONOS_FIRE_AT")
	s.mustCLI(args...)
	return id
}

// ---- the ledger ----

// ledgerLine is one line of the run ledger, read straight from the files.
type ledgerLine struct {
	Time       time.Time `json:"time"`
	RunID      string    `json:"run_id"`
	JobID      string    `json:"job_id"`
	State      string    `json:"state"`
	Slot       time.Time `json:"slot"`
	Trigger    string    `json:"trigger"`
	Attempt    int       `json:"attempt"`
	LatenessMS int64     `json:"lateness_ms"`
	Reason     string    `json:"reason"`
	Owner      string    `json:"owner"`
	Discarded  bool      `json:"discarded"`
}

// readLedger reads every line of the home's ledger, in file order.
func readLedger(t *testing.T, home string) []ledgerLine {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(home, "runs", "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []ledgerLine
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var l ledgerLine
			if err := json.Unmarshal(line, &l); err != nil {
				// A torn last line is possible only after a crash mid-write.
				continue
			}
			out = append(out, l)
		}
	}
	return out
}

// run is the fold of a run's lines: its last state that was not discarded.
type run struct {
	id, job, state, trigger, reason string
	slot                            time.Time
	owners                          map[string]bool
	states                          []string
}

// foldRuns folds ledger lines by run id.
func foldRuns(lines []ledgerLine) map[string]*run {
	runs := map[string]*run{}
	for _, l := range lines {
		r := runs[l.RunID]
		if r == nil {
			r = &run{id: l.RunID, job: l.JobID, slot: l.Slot, trigger: l.Trigger, owners: map[string]bool{}}
			runs[l.RunID] = r
		}
		r.states = append(r.states, l.State)
		if l.Owner != "" {
			r.owners[l.Owner] = true
		}
		if l.Discarded {
			continue
		}
		r.state = l.State
		if l.Reason != "" {
			r.reason = l.Reason
		}
	}
	return runs
}

// bySlot groups the runs of job by slot.
func bySlot(runs map[string]*run, job string) map[time.Time][]*run {
	out := map[time.Time][]*run{}
	for _, r := range runs {
		if r.job == job {
			out[r.slot.UTC()] = append(out[r.slot.UTC()], r)
		}
	}
	return out
}

func describeRuns(rs []*run) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "[%s %s %s %v %q] ", r.id, r.trigger, r.state, r.states, r.reason)
	}
	return b.String()
}

// ---- a callback address shared by replicas ----

// spreadProxy is one callback address in front of several agent replicas,
// as a load balancer would be: each fire goes to the next replica in turn,
// and to another one when a replica refuses the connection.
type spreadProxy struct {
	srv      *httptest.Server
	backends []string
	next     atomic.Uint64
	mu       sync.Mutex
	served   map[string]int
}

func newSpreadProxy(t *testing.T, backends []string) *spreadProxy {
	p := &spreadProxy{backends: backends, served: map[string]int{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// URL is the shared callback address.
func (p *spreadProxy) URL() string { return p.srv.URL }

// servedBy returns how many fires each replica answered.
func (p *spreadProxy) servedBy() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.served {
		out[k] = v
	}
	return out
}

var proxyClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}

func (p *spreadProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadGateway)
		return
	}
	start := int(p.next.Add(1))
	for i := range p.backends {
		b := p.backends[(start+i)%len(p.backends)]
		req, err := http.NewRequestWithContext(r.Context(), r.Method, b+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			continue
		}
		req.Header = r.Header.Clone()
		resp, err := proxyClient.Do(req)
		if err != nil {
			continue // refused or reset: try the next replica
		}
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(data)
		p.mu.Lock()
		p.served[b]++
		p.mu.Unlock()
		return
	}
	http.Error(w, `{"error":"temporarily_unavailable","error_description":"no replica answered"}`, http.StatusServiceUnavailable)
}
