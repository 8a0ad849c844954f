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

	"github.com/chronoscron/chronos/contract"
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
	// home (default 1). NAS calls them through one address that spreads
	// calls over the replicas (as a load balancer would).
	Agents int
	// KeyCheck is NAS's key_check_interval (default 30s).
	KeyCheck time.Duration
	// RetryBase and RetryMaxDelay shorten NAS's retry ladder
	// (relay.retry.base and relay.retry.max_delay) when set.
	RetryBase, RetryMaxDelay time.Duration
	// RedisURL, when set, is the store (a redis:// URL of a server the
	// test owns, with its prefix); it wins over Redis.
	RedisURL string
	// Resync is the agents' cron.chronos.resync_interval (default: unset).
	Resync time.Duration
	// IdleExit, when set, starts the agents with --idle-exit.
	IdleExit time.Duration
	// Direct turns direct delivery on at both ends: the agents file allows
	// it (delivery: direct), NAS and the relays read an encryption key file
	// (relay.cron_key_encryption_key_file), and the agents ask for it
	// (cron.chronos.delivery: direct).
	Direct bool
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
	// ids maps the tests' job names to the ids the agent gave them.
	ids map[string]string
	// direct: the agents ask for direct delivery (systemOptions.Direct).
	direct bool
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
	s := &system{t: t, dir: t.TempDir(), ids: map[string]string{}}
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
	agentsFile := fmt.Sprintf("- agent_id: %s\n  instance_id: %s\n  token_sha256: %s\n", agentID, instanceID, hex.EncodeToString(sum[:]))
	direct := ""
	if o.Direct {
		s.direct = true
		agentsFile += "  delivery: direct\n"
		direct = "  cron_key_encryption_key_file: cron-key-encryption.key\n"
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		writeFile(t, s.dir, "cron-key-encryption.key", base64.StdEncoding.EncodeToString(key)+"\n")
	}
	writeFile(t, s.dir, "agents.yaml", agentsFile)

	store := "memory"
	switch {
	case o.RedisURL != "":
		store = o.RedisURL
	case o.Redis:
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
	retry := ""
	if o.RetryBase > 0 {
		retry += fmt.Sprintf("  retry:\n    base: %s\n", o.RetryBase)
		if o.RetryMaxDelay > 0 {
			retry += fmt.Sprintf("    max_delay: %s\n", o.RetryMaxDelay)
		}
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
%s%sagents_file: agents.yaml
operator_token_file: operator-token
allow_private_callbacks: true
`, nasPort, relayPort, s.publicURL, store, keyCheck, dispatchers, retry, direct))

	t.Cleanup(func() {
		if t.Failed() {
			s.dump()
		}
	})
	s.nas = startProc(t, "nas", s.dir, nil, "nas", "--config", "nas.yaml")
	waitReady(t, s.nas, s.publicURL+"/readyz", 30*time.Second)
	for i := range o.Relays {
		health := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		r := startProc(t, fmt.Sprintf("relay-%d", i+1), s.dir, nil, "relay", "--config", "nas.yaml", "--dispatchers", "2", "--lease", "3s", "--listen", health)
		waitReady(t, r, "http://"+health+"/readyz", 30*time.Second)
		s.relays = append(s.relays, r)
	}

	n := max(o.Agents, 1)
	for range n {
		s.agentURLs = append(s.agentURLs, fmt.Sprintf("http://127.0.0.1:%d", freePort(t)))
	}
	// NAS always calls the agents through the proxy, so the tests see every
	// fire and its answer.
	s.proxy = newSpreadProxy(t, s.agentURLs)
	s.callbackURL = s.proxy.URL()
	for i, u := range s.agentURLs {
		name := fmt.Sprintf("agent-%d.yaml", i+1)
		cfg := s.agentConfig(strings.TrimPrefix(u, "http://"))
		if o.Resync > 0 {
			cfg += fmt.Sprintf("    resync_interval: %s\n", o.Resync)
		}
		writeFile(t, s.dir, name, cfg)
		args := []string{"agent", "serve", "--config", name}
		if o.IdleExit > 0 {
			args = append(args, "--idle-exit", o.IdleExit.String())
		}
		a := startProc(t, fmt.Sprintf("agent-%d", i+1), s.dir, nil, args...)
		s.agents = append(s.agents, a)
	}
	for i, a := range s.agents {
		waitReady(t, a, s.agentURLs[i]+"/readyz", 30*time.Second)
	}
	return s
}

// dump logs the ledger and the fires the proxy saw, to explain a failure.
func (s *system) dump() {
	var b strings.Builder
	names := map[string]string{}
	for n, id := range s.ids {
		names[id] = n
	}
	for _, l := range readLedger(s.t, s.home) {
		fmt.Fprintf(&b, "  %s %-8s %-10s slot %s %-11s %-9s attempt %d owner %s %s\n", l.Time.Format("15:04:05.000"), names[l.JobID], l.RunID, l.Slot.Format("15:04:05"), l.State, l.Trigger, l.Attempt, l.Owner, l.Reason)
	}
	s.t.Logf("---- ledger:\n%s", b.String())
	b.Reset()
	if s.proxy != nil {
		for _, f := range s.proxy.records() {
			fmt.Fprintf(&b, "  %s %-8s fire_at %s attempt %d kid %.8s → %s %d %s\n", f.at.Format("15:04:05.000"), names[f.job], f.fireAt.Format("15:04:05"), f.attempt, f.kid, f.backend, f.status, f.answer)
		}
		s.t.Logf("---- fires through the proxy:\n%s", b.String())
	}
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
`, s.home, addr, s.publicURL, s.callbackURL, instanceID, s.publicURL) + map[bool]string{true: "    delivery: direct\n"}[s.direct]
}

// mustCLI runs a chronos command that must succeed and returns its stdout.
func (s *system) mustCLI(args ...string) string {
	s.t.Helper()
	return mustChronos(s.t, s.dir, nil, args...)
}

// addJob adds a shell job with id name to the agents' home through the CLI
// (the running agents see the change and arm it) and returns its id.
func (s *system) addJob(name, schedule string, extra ...string) string {
	s.t.Helper()
	args := []string{"jobs", "add", "--home", s.home, "--id", name, "--schedule", schedule}
	args = append(args, extra...)
	args = append(args, "--", `echo "$CHRONOS_JOB_ID $CHRONOS_FIRE_AT"`)
	out := s.mustCLI(args...)
	if _, ok := readJobs(s.t, s.home)[name]; !ok || !strings.Contains(out, name) {
		s.t.Fatalf("jobs add did not store job %s:\n%s", name, out)
	}
	s.ids[name] = name
	return name
}

// jobID returns the id of the job the test named name.
func (s *system) jobID(name string) string {
	s.t.Helper()
	id, ok := s.ids[name]
	if !ok {
		s.t.Fatalf("no job named %s", name)
	}
	return id
}

// armed returns NAS's armed one-shot of job, as the agent lists it.
func (s *system) armed(job string) contract.ArmedJob {
	s.t.Helper()
	var found *contract.ArmedJob
	eventually(s.t, 10*time.Second, "NAS to hold an armed fire of "+job, func() (bool, string) {
		code, body := httpGet(s.publicURL+contract.PathList, "Authorization", "Bearer "+s.agentToken)
		var list contract.ListResponse
		if code != 200 || json.Unmarshal([]byte(body), &list) != nil {
			return false, fmt.Sprintf("list: %d %s", code, body)
		}
		for _, a := range list.Armed {
			if a.JobID == job {
				found = &a
				return true, ""
			}
		}
		return false, body
	})
	return *found
}

// relayCall is the body of a relay call for an armed one-shot.
func (s *system) relayCall(a contract.ArmedJob, attempt int) []byte {
	body, err := json.Marshal(contract.RelayRequest{ScheduleID: a.ScheduleID, AgentID: agentID, JobID: a.JobID, FireAt: a.FireAt, Attempt: attempt})
	if err != nil {
		s.t.Fatal(err)
	}
	return body
}

// postRelay signs body as delivery id with the relay secret, as a
// dispatcher does, POSTs it to NAS's relay route and returns the answer.
func (s *system) postRelay(id string, body []byte) string {
	data, err := os.ReadFile(filepath.Join(s.dir, "relay-secrets"))
	if err != nil {
		s.t.Error(err)
		return ""
	}
	key, err := contract.ParseWebhookSecret(strings.TrimSpace(string(data)))
	if err != nil {
		s.t.Error(err)
		return ""
	}
	req, _ := http.NewRequest(http.MethodPost, s.internalURL+contract.PathRelay, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range contract.WebhookHeaders([][]byte{key}, id, time.Now(), body) {
		req.Header.Set(k, v)
	}
	resp, err := proxyClient.Do(req)
	if err != nil {
		s.t.Error(err)
		return ""
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(answer)))
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

// ---- a callback address in front of the replicas ----

// fireRecord is one fire the proxy passed to a replica.
type fireRecord struct {
	path    string // the agent route called (fires, or a reconcile request)
	at      time.Time
	job     string
	fireAt  time.Time
	attempt int
	kid     string
	backend string
	status  int    // the replica's answer
	answer  string // the replica's body
	// retryAfter is the replica's Retry-After header, passed on to NAS.
	retryAfter string
}

// spreadProxy is the one callback address NAS calls, in front of the agent
// replicas, as a load balancer would be: each fire goes to the next replica
// in turn, and to another one when a replica refuses the connection. It
// records every fire, and can be told to misbehave for a job: lose the
// replica's answer (NAS sees a 503 and the relay delivers again), or send
// the same request to every replica at once.
type spreadProxy struct {
	srv      *httptest.Server
	backends []string
	next     atomic.Uint64

	mu        sync.Mutex
	fires     []fireRecord
	loseFirst map[string]int  // job → answers still to lose
	fanOut    map[string]bool // job → send to every replica
}

func newSpreadProxy(t *testing.T, backends []string) *spreadProxy {
	p := &spreadProxy{backends: backends, loseFirst: map[string]int{}, fanOut: map[string]bool{}}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// URL is the shared callback address.
func (p *spreadProxy) URL() string { return p.srv.URL }

// loseAnswers makes the proxy drop the replicas' answers to the next n fires
// of job and answer NAS 503 instead, as if the answer was lost on the way.
func (p *spreadProxy) loseAnswers(job string, n int) {
	p.mu.Lock()
	p.loseFirst[job] = n
	p.mu.Unlock()
}

// duplicate makes the proxy deliver every fire of job to every replica.
func (p *spreadProxy) duplicate(job string) {
	p.mu.Lock()
	p.fanOut[job] = true
	p.mu.Unlock()
}

// records returns the fires passed so far.
func (p *spreadProxy) records() []fireRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]fireRecord(nil), p.fires...)
}

var proxyClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}

// forward sends the request to backend b and records the answer.
func (p *spreadProxy) forward(r *http.Request, body []byte, b string, rec fireRecord) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, b+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header = r.Header.Clone()
	resp, err := proxyClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	rec.backend, rec.status, rec.answer = b, resp.StatusCode, strings.TrimSpace(string(data))
	rec.retryAfter = resp.Header.Get("Retry-After")
	p.mu.Lock()
	p.fires = append(p.fires, rec)
	p.mu.Unlock()
	return resp, data, nil
}

func (p *spreadProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "read", http.StatusBadGateway)
		return
	}
	var fire struct {
		JobID   string    `json:"job_id"`
		FireAt  time.Time `json:"fire_at"`
		Attempt int       `json:"attempt"`
	}
	_ = json.Unmarshal(body, &fire)
	rec := fireRecord{path: r.URL.Path, at: time.Now(), job: fire.JobID, fireAt: fire.FireAt, attempt: fire.Attempt, kid: tokenKID(r.Header.Get("Authorization"))}
	p.mu.Lock()
	lose := p.loseFirst[fire.JobID] > 0
	if lose {
		p.loseFirst[fire.JobID]--
	}
	fan := p.fanOut[fire.JobID]
	p.mu.Unlock()

	if fan && len(p.backends) > 1 {
		var wg sync.WaitGroup
		answers := make([][]byte, len(p.backends))
		codes := make([]int, len(p.backends))
		for i, b := range p.backends {
			wg.Go(func() {
				if resp, data, err := p.forward(r, body, b, rec); err == nil {
					codes[i], answers[i] = resp.StatusCode, data
				}
			})
		}
		wg.Wait()
		for i := range p.backends {
			if codes[i] == http.StatusAccepted {
				writeAnswer(w, codes[i], answers[i])
				return
			}
		}
		for i := range p.backends {
			if codes[i] != 0 {
				writeAnswer(w, codes[i], answers[i])
				return
			}
		}
		http.Error(w, `{"error":"temporarily_unavailable","error_description":"no replica answered"}`, http.StatusServiceUnavailable)
		return
	}

	start := int(p.next.Add(1))
	for i := range p.backends {
		b := p.backends[(start+i)%len(p.backends)]
		resp, data, err := p.forward(r, body, b, rec)
		if err != nil {
			continue // refused or reset: try the next replica
		}
		if lose {
			writeAnswer(w, http.StatusServiceUnavailable, []byte(`{"error":"temporarily_unavailable","error_description":"answer lost on the way"}`))
			return
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		writeAnswer(w, resp.StatusCode, data)
		return
	}
	writeAnswer(w, http.StatusServiceUnavailable, []byte(`{"error":"temporarily_unavailable","error_description":"no replica answered"}`))
}

func writeAnswer(w http.ResponseWriter, code int, data []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// tokenKID returns the kid of a bearer JWT's header (unverified).
func tokenKID(authorization string) string {
	tok, _ := strings.CutPrefix(authorization, "Bearer ")
	head, _, _ := strings.Cut(tok, ".")
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return ""
	}
	var h struct {
		Kid string `json:"kid"`
	}
	_ = json.Unmarshal(raw, &h)
	return h.Kid
}
