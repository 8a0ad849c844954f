package redise2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// soak scales the tests up when CHRONOS_SOAK=1.
func soak() bool { return os.Getenv("CHRONOS_SOAK") == "1" }

// publicURL is the public URL every NAS process of a cluster shares (as
// behind one load balancer): the issuer of fire tokens.
const publicURL = "http://nas.chronos.test"

// proc is one process of the built binary, restartable with the same args.
type proc struct {
	t    *testing.T
	name string
	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *capped
}

// capped keeps the last 64 KiB a process wrote, and counts all it wrote.
type capped struct {
	mu    sync.Mutex
	b     []byte
	total int64
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	c.b = append(c.b, p...)
	if len(c.b) > 64<<10 {
		c.b = append([]byte(nil), c.b[len(c.b)-(64<<10):]...)
	}
	return len(p), nil
}

// written is how many bytes the process wrote in all, restarts included.
func (c *capped) written() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}

// startProc starts `chronos args...` in dir; it is killed when the test ends.
func startProc(t *testing.T, name, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, dir: dir, args: args, out: &capped{}}
	p.launch()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of %s (last lines):\n%s", p.name, lastLines(p.out.String(), 25))
		}
	})
	return p
}

// launch starts the process.
func (p *proc) launch() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(bin, p.args...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	p.cmd, p.done = cmd, done
}

// kill ends the process with SIGKILL (a crash) and waits for it.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// restart starts a killed process again, as a supervisor would.
func (p *proc) restart() {
	p.kill()
	p.launch()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freeAddr returns a free loopback host:port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitReady polls url until it answers 200, failing the test after within
// or if p exits.
func waitReady(t *testing.T, p *proc, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready:\n%s", p.name, lastLines(p.out.String(), 25))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s within %s:\n%s", p.name, url, within, lastLines(p.out.String(), 25))
		}
		time.Sleep(20 * time.Millisecond) // readiness poll interval
	}
}

// writeFile writes dir/name.
func writeFile(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
}

// agentCred is a provisioned agent and its access token.
type agentCred struct {
	id, instance, token string
}

// cluster is the shared files of NAS and relay processes on one store.
type cluster struct {
	t      *testing.T
	dir    string
	store  string
	agents []agentCred
}

// newCluster writes signing keys, relay secrets and an agents file for
// agents agents, for processes on store.
func newCluster(t *testing.T, store string, agents int) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), store: store}
	gen := exec.Command(bin, "keys", "generate", "--out", "keys", "--activate")
	gen.Dir = c.dir
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("keys generate: %v: %s", err, out)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	writeFile(t, c.dir, "relay-secrets", "whsec_"+base64.StdEncoding.EncodeToString(secret)+"\n")
	var agentsYAML strings.Builder
	for i := range agents {
		tok := make([]byte, 24)
		_, _ = rand.Read(tok)
		a := agentCred{id: fmt.Sprintf("agent-%02d", i), instance: fmt.Sprintf("inst-%02d", i), token: hex.EncodeToString(tok)}
		sum := sha256.Sum256([]byte(a.token))
		fmt.Fprintf(&agentsYAML, "- agent_id: %s\n  instance_id: %s\n  token_sha256: %s\n", a.id, a.instance, hex.EncodeToString(sum[:]))
		c.agents = append(c.agents, a)
	}
	writeFile(t, c.dir, "agents.yaml", agentsYAML.String())
	return c
}

// nasConfig writes name: a NAS listening on listen, with no dispatchers of
// its own, whose relays (reading the same file) POST to nasURL.
func (c *cluster) nasConfig(name, listen, nasURL string) {
	c.t.Helper()
	writeFile(c.t, c.dir, name, fmt.Sprintf(`listen: %s
public_url: %s
store: %q
signing_keys_dir: keys
relay:
  secrets_file: relay-secrets
  dispatchers: 0
  nas_url: %s
agents_file: agents.yaml
allow_private_callbacks: true
log_level: warn
limits:
  rate_per_second: 1000000
  burst: 1000000
  max_armed_per_agent: 1000000
`, listen, publicURL, c.store, nasURL))
}

// startNAS starts `chronos nas` on a new config and waits until it is ready.
func (c *cluster) startNAS(name string) (*proc, string) {
	c.t.Helper()
	addr := freeAddr(c.t)
	url := "http://" + addr
	c.nasConfig(name+".yaml", addr, url)
	p := startProc(c.t, name, c.dir, "nas", "--config", name+".yaml")
	waitReady(c.t, p, url+contract.PathReadyz, 30*time.Second)
	return p, url
}

// startRelay starts `chronos relay` on the config of the NAS it delivers to.
func (c *cluster) startRelay(name, nasName string, lease time.Duration) *proc {
	c.t.Helper()
	health := freeAddr(c.t)
	p := startProc(c.t, name, c.dir, "relay", "--config", nasName+".yaml", "--dispatchers", "2",
		"--lease", lease.String(), "--listen", health)
	waitReady(c.t, p, "http://"+health+"/readyz", 30*time.Second)
	return p
}

// fire is one provisioned one-shot.
type fire struct {
	agent, job string
	fireAt     time.Time
	scheduleID string
}

// slot names a fire at the agent: (job, fire_at).
func slot(agent, job string, fireAt time.Time) string {
	return agent + "/" + job + "@" + fireAt.UTC().Format(time.RFC3339Nano)
}

// provision arms f through NAS's agent API as agent a; it returns the
// schedule id NAS acknowledged, or an error (not acknowledged).
func provision(ctx context.Context, client *http.Client, nasURL string, a agentCred, callback string, f fire) (string, error) {
	at := f.fireAt.UTC().Format(time.RFC3339Nano)
	body, _ := json.Marshal(map[string]string{
		"job_id": f.job, "fire_at": at, "agent_callback_url": callback, "dedup_key": f.job + ":" + at,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, nasURL+contract.PathProvision, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	req.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+a.token)
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("provision %s/%s: %d %s", a.id, f.job, resp.StatusCode, b)
	}
	var out struct {
		ScheduleID string `json:"schedule_id"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.ScheduleID == "" {
		return "", fmt.Errorf("provision %s/%s: answer %s", a.id, f.job, b)
	}
	return out.ScheduleID, nil
}

// armAll provisions every fire with workers parallel agents, spreading the
// calls over nasURLs; a call that fails is retried (on the next NAS) like an
// agent's reconcile would, until ctx ends. onAck sees every acknowledged arm.
func armAll(ctx context.Context, t *testing.T, nasURLs []string, agents map[string]agentCred, callback func(agent string) string,
	fires []fire, workers int, onAck func(i int, scheduleID string)) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(fires) {
					return
				}
				f := fires[i]
				for try := 0; ; try++ {
					sid, err := provision(ctx, client, nasURLs[(i+try+w)%len(nasURLs)], agents[f.agent], callback(f.agent), f)
					if err == nil {
						onAck(i, sid)
						break
					}
					if ctx.Err() != nil {
						errc <- fmt.Errorf("%v (gave up: %w)", err, ctx.Err())
						return
					}
					time.Sleep(time.Duration(min(try+1, 10)) * 20 * time.Millisecond) // agent-side retry backoff
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("arm: %v", err)
	}
}

// sink is the agents' side: it verifies every fire token against NAS's key
// set, claims each slot once (202 the first time, 200 duplicate after), and
// records what arrived.
type sink struct {
	t        *testing.T
	srv      *http.Server
	url      string
	jwks     []byte
	verified atomic.Int64
	failed   atomic.Int64
	early    atomic.Int64 // fires that arrived before their fire_at

	// behave, when set, decides per request how an agent answers before
	// its fire is verified: after a delay, or refused with a status.
	behave func(agent string, now time.Time) behaviour
	// onFirst, when set, sees each slot the first time it is accepted, as
	// an agent that re-arms its job's next fire when one arrives.
	onFirst func(agent, job string, fireAt time.Time)

	mu        sync.Mutex
	verifiers map[string]*fireauth.JWTVerifier
	arrivals  map[string]int           // slot → arrivals
	accepted  map[string]int           // slot → 202 answers
	lags      map[string]time.Duration // slot → lag of its first arrival after fire_at
	firstAt   map[string]time.Time     // slot → its first arrival
	requests  map[string]int           // agent → requests, refused ones included
	refused   map[string]int           // agent → requests refused by behave
	changed   chan struct{}
}

// behaviour is how an agent answers one request: Refuse, when set, is the
// status it answers at once (with RetryAfter); else it answers normally
// after Delay.
type behaviour struct {
	Delay      time.Duration
	Refuse     int
	RetryAfter string
}

// startSink serves agents' fire endpoints at {url}/a/{agent}/api/cron/fire.
func startSink(t *testing.T, jwks []byte) *sink {
	t.Helper()
	s := &sink{t: t, jwks: jwks, verifiers: map[string]*fireauth.JWTVerifier{},
		arrivals: map[string]int{}, accepted: map[string]int{}, lags: map[string]time.Duration{},
		firstAt: map[string]time.Time{}, requests: map[string]int{}, refused: map[string]int{}, changed: make(chan struct{}, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sink listen: %v", err)
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = s.srv.Close()
		for _, v := range s.verifiers {
			v.Close()
		}
	})
	return s
}

// callback is agent's callback base URL.
func (s *sink) callback(agent string) string { return s.url + "/a/" + agent }

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	rest, _ := strings.CutPrefix(r.URL.Path, "/a/")
	agent, tail, _ := strings.Cut(rest, "/")
	if "/"+tail != contract.PathFire {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests[agent]++
	s.mu.Unlock()
	if s.behave != nil {
		b := s.behave(agent, now)
		if b.Refuse != 0 {
			s.mu.Lock()
			s.refused[agent]++
			s.mu.Unlock()
			if b.RetryAfter != "" {
				w.Header().Set(contract.HeaderRetryAfter, b.RetryAfter)
			}
			w.WriteHeader(b.Refuse)
			return
		}
		if b.Delay > 0 {
			select {
			case <-time.After(b.Delay): // the agent doing its work
			case <-r.Context().Done():
				return
			}
		}
	}
	var f contract.FireRequest
	if err := json.Unmarshal(body, &f); err != nil {
		s.failed.Add(1)
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	v, ok := s.verifiers[agent]
	if !ok {
		inst := "inst-" + strings.TrimPrefix(agent, "agent-")
		v, err = fireauth.NewStatic(s.jwks, fireauth.Config{Issuer: publicURL, Audience: contract.Audience(inst)})
		if err != nil {
			s.mu.Unlock()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		s.verifiers[agent] = v
	}
	s.mu.Unlock()
	token, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), contract.BearerPrefix)
	if err := v.VerifyFire(r.Context(), token, body, f); err != nil {
		s.failed.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	s.verified.Add(1)
	if now.Before(f.FireAt.Time) {
		s.early.Add(1)
	}
	key := slot(agent, f.JobID, f.FireAt.Time)
	s.mu.Lock()
	s.arrivals[key]++
	first := s.accepted[key] == 0
	if first {
		s.accepted[key]++
		s.lags[key] = now.Sub(f.FireAt.Time)
		s.firstAt[key] = now
	}
	s.mu.Unlock()
	if first && s.onFirst != nil {
		s.onFirst(agent, f.JobID, f.FireAt.Time)
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	if !first {
		_ = json.NewEncoder(w).Encode(contract.FireResponse{Status: contract.FireDuplicate})
		return
	}
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(contract.FireResponse{Status: contract.FireAccepted, JobID: f.JobID, RunID: f.ScheduleID})
}

// counts returns how many distinct slots arrived and how many arrivals in all.
func (s *sink) counts() (slots, arrivals int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.arrivals {
		arrivals += n
	}
	return len(s.arrivals), arrivals
}

// waitSlots waits until n distinct slots arrived or within passes.
func (s *sink) waitSlots(n int, within time.Duration) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		if got, _ := s.counts(); got >= n {
			return true
		}
		select {
		case <-s.changed:
		case <-deadline.C:
			return false
		}
	}
}

// fetchJWKS reads a NAS's key set.
func fetchJWKS(t *testing.T, nasURL string) []byte {
	t.Helper()
	resp, err := http.Get(nasURL + contract.PathJWKS)
	if err != nil {
		t.Fatalf("jwks: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("jwks: %d %v", resp.StatusCode, err)
	}
	return b
}

// openStore opens the cluster's store in the test process, to inspect it.
func openStore(t *testing.T, store string) *relayredis.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := relayredis.Open(ctx, store, relayredis.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// waitEmpty waits until the store holds no armed or leased one-shot and no
// dead letter, failing the test after within.
func waitEmpty(t *testing.T, e *relayredis.Engine, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := e.Stats(ctx)
		cancel()
		if err == nil && st == (relay.Stats{}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("store not empty %s after the last fire: %+v (err %v)", within, st, err)
		}
		time.Sleep(50 * time.Millisecond) // store poll interval
	}
}
