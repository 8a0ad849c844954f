package postgrese2e

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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	relaypostgres "github.com/chronoscron/chronos/relay/postgres"
)

// soak scales the tests up when CHRONOS_SOAK=1.
func soak() bool { return os.Getenv("CHRONOS_SOAK") == "1" }

// publicURL is the public URL every NAS process of a cluster shares (as
// behind one load balancer): the issuer of fire tokens.
const publicURL = "http://nas.chronos.test"

// notSchema is what a test name holds that a schema name may not.
var notSchema = regexp.MustCompile(`[^a-z0-9_]+`)

// storeOn returns the store URL of a new schema, named for t, on the
// PostgreSQL server at serverURL.
func storeOn(t *testing.T, serverURL string) string {
	t.Helper()
	name := notSchema.ReplaceAllString(strings.ToLower(t.Name()), "_")
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	schema := "e2e_" + name[:min(len(name), 40)] + "_" + hex.EncodeToString(suffix)
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("server URL: %v", err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// proc is one process of the built binary, restartable with the same args.
type proc struct {
	t    *testing.T
	name string
	dir  string
	args []string
	out  *tail

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// tail keeps the last 64 KiB a process wrote.
type tail struct {
	mu sync.Mutex
	b  []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - 64<<10; over > 0 {
		w.b = append([]byte(nil), w.b[over:]...)
	}
	return len(p), nil
}

// last returns the last n lines written.
func (w *tail) last(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := strings.Split(strings.TrimRight(string(w.b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// matching returns the first n lines kept that hold substr.
func (w *tail) matching(substr string, n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for line := range strings.SplitSeq(string(w.b), "\n") {
		if strings.Contains(line, substr) && len(out) < n {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// startProc starts `chronos args...` in dir; it is killed when the test
// ends, and its last lines are logged when the test failed.
func startProc(t *testing.T, name, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, dir: dir, args: args, out: &tail{}}
	p.launch()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- output of %s (last lines):\n%s", p.name, p.out.last(25))
			if failed := p.out.matching(`"msg":"request failed"`, 10); failed != "" {
				t.Logf("--- requests %s failed:\n%s", p.name, failed)
			}
		}
	})
	return p
}

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
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.cmd = nil
	}
}

// restart starts a killed process again, as a supervisor would.
func (p *proc) restart() {
	p.kill()
	p.launch()
}

// waitReady polls url until it answers 200, failing the test after within
// or when p exits.
func waitReady(t *testing.T, p *proc, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready:\n%s", p.name, p.out.last(25))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready at %s within %s:\n%s", p.name, url, within, p.out.last(25))
		}
		time.Sleep(20 * time.Millisecond) // readiness poll interval
	}
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

// agentCred is a provisioned agent and its access token.
type agentCred struct {
	id, token string
}

// cluster is the shared files of NAS and relay processes on one store.
type cluster struct {
	t      *testing.T
	dir    string
	store  string
	agents []agentCred
}

// newCluster writes signing keys, relay secrets and an agents file of n
// agents (agent-NN, instance inst-NN) for processes on store.
func newCluster(t *testing.T, store string, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), store: store}
	gen := exec.Command(bin, "keys", "generate", "--out", "keys", "--activate")
	gen.Dir = c.dir
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("keys generate: %v: %s", err, out)
	}
	c.write("relay-secrets", "whsec_"+base64.StdEncoding.EncodeToString(random(32))+"\n")
	var agents strings.Builder
	for i := range n {
		a := agentCred{id: fmt.Sprintf("agent-%02d", i), token: hex.EncodeToString(random(24))}
		sum := sha256.Sum256([]byte(a.token))
		fmt.Fprintf(&agents, "- agent_id: %s\n  instance_id: inst-%02d\n  token_sha256: %x\n", a.id, i, sum)
		c.agents = append(c.agents, a)
	}
	c.write("agents.yaml", agents.String())
	return c
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func (c *cluster) write(name, data string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.dir, name), []byte(data), 0o600); err != nil {
		c.t.Fatalf("write %s: %v", name, err)
	}
}

// startNAS writes name.yaml, a NAS on the cluster's store that runs the
// store's migrations at start and whose relays (reading the same file) POST
// to it, starts `chronos nas` on it and waits until it is ready. relayLines
// go under relay: (as "  dispatchers: 0\n"); the agent API's limits are
// raised so that a test provisions quickly.
func (c *cluster) startNAS(name, relayLines string) (*proc, string) {
	c.t.Helper()
	addr := freeAddr(c.t)
	nasURL := "http://" + addr
	c.write(name+".yaml", fmt.Sprintf(`listen: %s
public_url: %s
store: %q
store_migrate: true
signing_keys_dir: keys
relay:
  secrets_file: relay-secrets
  nas_url: %s
%sagents_file: agents.yaml
allow_private_callbacks: true
log_level: warn
limits:
  rate_per_second: 1000000
  burst: 1000000
  max_armed_per_agent: 1000000
`, addr, publicURL, c.store, nasURL, relayLines))
	p := startProc(c.t, name, c.dir, "nas", "--config", name+".yaml")
	waitReady(c.t, p, nasURL+contract.PathReadyz, 30*time.Second)
	return p, nasURL
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

// fire is one one-shot an agent arms.
type fire struct {
	agent, job string
	fireAt     time.Time
}

// slot names a fire at the agent, as its claim does: (job, fire_at).
func slot(agent, job string, fireAt time.Time) string {
	return agent + "/" + job + "@" + fireAt.UTC().Format(time.RFC3339Nano)
}

// plan spreads n fires over agents, due from first over spread.
func plan(agents []agentCred, n int, first time.Time, spread time.Duration) []fire {
	fires := make([]fire, n)
	for i := range fires {
		fires[i] = fire{
			agent:  agents[i%len(agents)].id,
			job:    fmt.Sprintf("job-%06d", i),
			fireAt: first.Add(time.Duration(int64(spread) * int64(i) / int64(n))).Truncate(time.Millisecond),
		}
	}
	return fires
}

// provisionBody is the agent API's provision request of f.
func provisionBody(f fire, callback string) contract.ProvisionRequest {
	at := f.fireAt.UTC().Format(time.RFC3339Nano)
	return contract.ProvisionRequest{JobID: f.job, FireAt: contract.NewTime(f.fireAt), AgentCallbackURL: callback, DedupKey: f.job + ":" + at}
}

// post sends body to url as the agent with token; it returns the status,
// the Retry-After header, the body and how long the answer took.
func post(ctx context.Context, client *http.Client, url, token string, body any) (int, string, []byte, time.Duration, error) {
	data, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return 0, "", nil, 0, err
	}
	req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	req.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+token)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, time.Since(start), err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header.Get(contract.HeaderRetryAfter), b, time.Since(start), nil
}

// armAll provisions every fire through the agent API with workers parallel
// callers, spreading them over nasURLs; a call that fails is retried (on
// the next NAS) as an agent's reconcile would, until ctx ends. It returns
// which fires NAS acknowledged; onAck, when set, sees each acknowledgement.
func armAll(ctx context.Context, t *testing.T, nasURLs []string, c *cluster, s *sink, fires []fire, workers int, onAck func(acked int)) []bool {
	t.Helper()
	tokens := map[string]string{}
	for _, a := range c.agents {
		tokens[a.id] = a.token
	}
	client := &http.Client{Timeout: 10 * time.Second}
	acked := make([]bool, len(fires))
	var next, count atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(fires); i = int(next.Add(1) - 1) {
				f := fires[i]
				for try := 0; ; try++ {
					nasURL := nasURLs[(i+try+w)%len(nasURLs)]
					code, _, body, _, err := post(ctx, client, nasURL+contract.PathProvision, tokens[f.agent], provisionBody(f, s.callback(f.agent)))
					if err == nil && code == http.StatusOK {
						acked[i] = true
						if n := count.Add(1); onAck != nil {
							onAck(int(n))
						}
						break
					}
					if ctx.Err() != nil {
						errc <- fmt.Errorf("provision %s/%s: %d %s %v (gave up: %w)", f.agent, f.job, code, body, err, ctx.Err())
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
	return acked
}

// sink plays the agents' fire endpoints: it verifies every fire token
// against NAS's key set and claims each slot once (202 the first time, 200
// duplicate after), counting arrivals and claims per slot.
type sink struct {
	t       *testing.T
	url     string
	jwks    []byte
	failed  atomic.Int64 // requests whose token or body did not verify
	early   atomic.Int64 // fires that arrived before their fire_at
	changed chan struct{}
	// behave, when set, decides how an agent answers a request before its
	// fire is verified: after a delay, or refused with a status.
	behave func(agent string, now time.Time) behaviour

	mu        sync.Mutex
	verifiers map[string]*fireauth.JWTVerifier
	arrivals  map[string]int           // slot → arrivals
	claimed   map[string]int           // slot → 202 answers
	lags      map[string]time.Duration // slot → its first arrival after fire_at
	firstAt   map[string]time.Time     // slot → its first arrival
	refused   map[string]int           // agent → requests refused by behave
}

// behaviour is how an agent answers one request: Refuse, when set, is the
// status it answers at once (with RetryAfter when set); else it answers
// normally after Delay.
type behaviour struct {
	Delay      time.Duration
	Refuse     int
	RetryAfter string
}

// startSink serves agents' fire endpoints at {url}/a/{agent}/api/cron/fire.
func startSink(t *testing.T, jwks []byte) *sink {
	t.Helper()
	s := &sink{t: t, jwks: jwks, changed: make(chan struct{}, 1), verifiers: map[string]*fireauth.JWTVerifier{},
		arrivals: map[string]int{}, claimed: map[string]int{}, lags: map[string]time.Duration{},
		firstAt: map[string]time.Time{}, refused: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sink listen: %v", err)
	}
	s.url = "http://" + ln.Addr().String()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		for _, v := range s.verifiers {
			v.Close()
		}
	})
	return s
}

// callback is agent's callback base URL.
func (s *sink) callback(agent string) string { return s.url + "/a/" + agent }

// verifier returns agent's fire token verifier (audience inst-NN).
func (s *sink) verifier(agent string) (*fireauth.JWTVerifier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.verifiers[agent]; ok {
		return v, nil
	}
	inst := "inst-" + strings.TrimPrefix(agent, "agent-")
	v, err := fireauth.NewStatic(s.jwks, fireauth.Config{Issuer: publicURL, Audience: contract.Audience(inst)})
	if err == nil {
		s.verifiers[agent] = v
	}
	return v, err
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	agent, tail, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/a/"), "/")
	if "/"+tail != contract.PathFire {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
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
		select {
		case <-time.After(b.Delay): // the agent doing its work
		case <-r.Context().Done():
			return
		}
	}
	var f contract.FireRequest
	v, err := s.verifier(agent)
	if err == nil {
		err = json.Unmarshal(body, &f)
	}
	if err == nil {
		token, _ := strings.CutPrefix(r.Header.Get(contract.HeaderAuthorization), contract.BearerPrefix)
		err = v.VerifyFire(r.Context(), token, body, f)
	}
	if err != nil {
		s.failed.Add(1)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if now.Before(f.FireAt.Time) {
		s.early.Add(1)
	}
	key := slot(agent, f.JobID, f.FireAt.Time)
	s.mu.Lock()
	s.arrivals[key]++
	first := s.claimed[key] == 0
	if first {
		s.claimed[key]++
		s.lags[key] = now.Sub(f.FireAt.Time)
		s.firstAt[key] = now
	}
	s.mu.Unlock()
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

// agentLags returns the lags after fire_at of agent's first arrivals, sorted.
func (s *sink) agentLags(agent string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lags []time.Duration
	for key, lag := range s.lags {
		if strings.HasPrefix(key, agent+"/") {
			lags = append(lags, lag)
		}
	}
	slices.Sort(lags)
	return lags
}

// refusals returns how many requests behave refused of agent.
func (s *sink) refusals(agent string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[agent]
}

// firstArrivals returns the time from the first slot's first arrival to
// the last slot's.
func (s *sink) firstArrivals() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first, last time.Time
	for _, at := range s.firstAt {
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(first)
}

// waitFor waits until done says so, rechecking at each arrival (and every
// 50 ms, as another waiter may have taken the news of one), or within
// passes; it reports whether done said so.
func (s *sink) waitFor(within time.Duration, done func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-s.changed:
		case <-tick.C:
		case <-deadline.C:
			return done()
		}
	}
	return true
}

// arrived returns a condition for waitFor: at least n distinct slots
// arrived.
func (s *sink) arrived(n int) func() bool {
	return func() bool { got, _ := s.counts(); return got >= n }
}

// mustArrive waits until n distinct slots arrived, failing the test with
// what the store holds when within passes first.
func (s *sink) mustArrive(t *testing.T, e *relaypostgres.Engine, n int, within time.Duration) {
	t.Helper()
	if !s.waitFor(within, s.arrived(n)) {
		got, _ := s.counts()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.Stats(ctx)
		t.Fatalf("%d of %d fires reached the agents within %s (store %+v, %v)", got, n, within, st, err)
	}
}

// checkDelivered fails the test unless every acknowledged fire reached its
// agent, each slot was claimed once, every token verified and none arrived
// early.
func checkDelivered(t *testing.T, s *sink, fires []fire, acked []bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	missing := 0
	for i, f := range fires {
		key := slot(f.agent, f.job, f.fireAt)
		if acked[i] && s.arrivals[key] == 0 {
			if missing < 5 {
				t.Errorf("acknowledged fire %s never reached the agent", key)
			}
			missing++
		}
		if s.claimed[key] > 1 {
			t.Errorf("slot %s claimed %d times", key, s.claimed[key])
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged fires lost", missing)
	}
	if n := s.failed.Load(); n > 0 {
		t.Fatalf("%d fire requests failed verification", n)
	}
	if n := s.early.Load(); n > 0 {
		t.Fatalf("%d fires arrived before their fire_at", n)
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

// openStore opens the store NAS migrated in the test process, to inspect it.
func openStore(t *testing.T, store string) *relaypostgres.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := relaypostgres.Open(ctx, store, relaypostgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

// waitEmpty waits until the store holds no armed or leased one-shot and no
// dead letter, failing the test after within.
func waitEmpty(t *testing.T, e *relaypostgres.Engine, within time.Duration) {
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
