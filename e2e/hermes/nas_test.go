package hermese2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/buildtest"
	"github.com/chronoscron/chronos/internal/pgtest"
)

// The agent NAS knows through the agents file by the hash of its opaque token.
const (
	agentID    = "hermes-1"
	instanceID = "inst-hermes-1"
)

// nasEnv is one `chronos nas` process and the directory of its config, keys
// and secrets.
type nasEnv struct {
	t   *testing.T
	dir string
	// publicURL is listen's URL: agent API, JWKS, the iss of fire tokens.
	publicURL string
	// internalURL is relay_listen's URL: operator routes and /metrics.
	internalURL string
	opToken     string
	// tokenFile holds the opaque access token of agentID.
	tokenFile string
	agentTok  string
	proc      *proc
}

// nasOptions adds to the configuration every test shares.
type nasOptions struct {
	// agents are more agents-file entries (YAML list items).
	agents string
	// extra is appended to nas.yaml (top-level YAML keys).
	extra string
	// store is the store: line's value; default memory. NAS migrates a
	// PostgreSQL store's schema at start (store_migrate).
	store string
}

// postgresStore returns the store URL of a new schema, named for t, on the
// PostgreSQL server the tests of this binary share.
func postgresStore(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatalf("PostgreSQL URL: %v", err)
	}
	name := strings.ToLower(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, t.Name()))
	q := u.Query()
	q.Set("schema", "hermes_"+name[:min(len(name), 40)]+"_"+strconv.FormatInt(time.Now().UnixNano()%1e9, 36))
	u.RawQuery = q.Encode()
	return u.String()
}

// randomToken returns n random bytes as URL-safe base64.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// startNAS writes a NAS configuration as docs/hermes.md describes it, which
// names no signing algorithm, and starts `chronos nas` with it. The keys come
// from `chronos keys generate` with its default algorithm too. The relay
// retries on a short ladder so that a retried fire arrives within a second.
func startNAS(t *testing.T, o nasOptions) *nasEnv {
	t.Helper()
	n := &nasEnv{t: t, dir: t.TempDir()}
	listen, internal := freePort(t), freePort(t)
	n.publicURL = fmt.Sprintf("http://127.0.0.1:%d", listen)
	n.internalURL = fmt.Sprintf("http://127.0.0.1:%d", internal)

	n.cli("keys", "generate", "--out", "keys", "--activate")
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	n.write("relay-secrets", "whsec_"+base64.StdEncoding.EncodeToString(secret)+"\n")
	n.opToken, n.agentTok = randomToken(24), randomToken(24)
	n.write("operator-token", n.opToken+"\n")
	n.tokenFile = n.write("agent-token", n.agentTok+"\n")
	sum := sha256.Sum256([]byte(n.agentTok))
	n.write("agents.yaml", fmt.Sprintf("- agent_id: %s\n  instance_id: %s\n  token_sha256: %s\n%s",
		agentID, instanceID, hex.EncodeToString(sum[:]), o.agents))
	store := "store: memory"
	if o.store != "" {
		store = fmt.Sprintf("store: %q\nstore_migrate: true", o.store)
	}
	n.write("nas.yaml", fmt.Sprintf(`listen: 127.0.0.1:%d
relay_listen: 127.0.0.1:%d
public_url: %s
%s
signing_keys_dir: keys
relay:
  secrets_file: relay-secrets
  retry:
    base: 100ms
    max_delay: 500ms
agents_file: agents.yaml
operator_token_file: operator-token
callback_allowlist: [127.0.0.1]
limits:
  burst: 300
%s`, listen, internal, n.publicURL, store, o.extra))

	n.proc = startProc(t, "nas", n.dir, "nas", "--config", "nas.yaml")
	waitReady(t, n.proc, n.publicURL+"/readyz", 30*time.Second)
	return n
}

// jwksURL is NAS's key set.
func (n *nasEnv) jwksURL() string { return n.publicURL + "/.well-known/jwks.json" }

// write writes a file into NAS's directory and returns its path.
func (n *nasEnv) write(name, data string) string {
	n.t.Helper()
	path := filepath.Join(n.dir, name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		n.t.Fatal(err)
	}
	return path
}

// cli runs `chronos args...` in NAS's directory and returns its stdout; it
// must exit 0.
func (n *nasEnv) cli(args ...string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = n.dir
	cmd.Env = childEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		n.t.Fatalf("chronos %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// deadLetter is one entry of `chronos dlq list --json`; fire_at is kept as
// the string NAS wrote.
type deadLetter struct {
	ScheduleID string `json:"schedule_id"`
	AgentID    string `json:"agent_id"`
	JobID      string `json:"job_id"`
	FireAt     string `json:"fire_at"`
	Attempts   int    `json:"attempts"`
	Reason     string `json:"reason"`
}

// deadLetters lists NAS's dead letter through the CLI, as an operator would.
func (n *nasEnv) deadLetters() []deadLetter {
	n.t.Helper()
	var out []deadLetter
	raw := n.cli("dlq", "list", "--config", "nas.yaml", "--json")
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		n.t.Fatalf("dlq list --json: %v\n%s", err, raw)
	}
	return out
}

// deadLettersNow reads the dead letter through the operator route (cheap
// enough to ask while waiting for something else); nil on any error.
func (n *nasEnv) deadLettersNow() []deadLetter {
	code, body := call(http.MethodGet, n.internalURL+"/api/operator/dlq", n.opToken, nil)
	if code != http.StatusOK {
		return nil
	}
	var page struct {
		Entries []deadLetter `json:"entries"`
	}
	_ = json.Unmarshal(body, &page)
	return page.Entries
}

// provisionCount is NAS's own count of answered provision calls
// (chronos_nas_api_requests_total of the provision route, every code).
func (n *nasEnv) provisionCount() int {
	n.t.Helper()
	code, body := call(http.MethodGet, n.internalURL+"/metrics", "", nil)
	if code != http.StatusOK {
		n.t.Fatalf("GET /metrics: %d %s", code, body)
	}
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "chronos_nas_api_requests_total{") || !strings.Contains(line, `route="/api/agent-cron/provision"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			n.t.Fatalf("metrics line %q: %v", line, err)
		}
		total += int(v)
	}
	return total
}

// listPage is one answer of GET /api/agent-cron/list with every fire_at kept
// as the string NAS wrote.
type listPage struct {
	Armed       []armedJob   `json:"armed"`
	NextCursor  *string      `json:"next_cursor"`
	FailedFires []failedFire `json:"failed_fires"`
}

// armedJob is one entry of list's armed.
type armedJob struct {
	JobID      string `json:"job_id"`
	FireAt     string `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
}

// failedFire is one entry of list's failed_fires.
type failedFire struct {
	JobID      string `json:"job_id"`
	FireAt     string `json:"fire_at"`
	ScheduleID string `json:"schedule_id"`
	Attempts   int    `json:"attempts"`
	Reason     string `json:"reason"`
}

// armedAt maps each armed job to its fire_at string.
func (p listPage) armedAt() map[string]string {
	m := map[string]string{}
	for _, a := range p.Armed {
		m[a.JobID] = a.FireAt
	}
	return m
}

// waitNothingArmed waits until NAS lists no armed job for token (NAS drops a
// delivered fire's row a moment after the agent's answer; nothing signals it).
func (n *nasEnv) waitNothingArmed(t *testing.T, token string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := call(http.MethodGet, n.publicURL+"/api/agent-cron/list", token, nil)
		var p listPage
		if code == http.StatusOK && json.Unmarshal(body, &p) == nil && len(p.Armed) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("NAS still lists armed jobs: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---- processes ----

// proc is one chronos process; it is killed when the test ends and its
// output is logged if the test failed.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *buildtest.Buffer
	done chan struct{}
	err  error
}

// childEnv is the test's environment without CHRONOS_ settings that could
// reconfigure the child.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHRONOS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func startProc(t *testing.T, name, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &buildtest.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Env = childEnv()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = childAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("---- output of %s:\n%s", p.name, tail(p.out.String(), 8000))
		}
	})
	return p
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitReady polls url until it answers 200 (there is no other signal that a
// process is ready), failing at once if p ends.
func waitReady(t *testing.T, p *proc, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if !p.running() {
			t.Fatalf("%s ended (%v) before %s answered 200:\n%s", p.name, p.err, url, tail(p.out.String(), 4000))
		}
		code, body := call(http.MethodGet, url, "", nil)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %s: last %d %s", url, within, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// call sends one request with an optional Bearer token and JSON body and
// returns the status (0 on a transport error) and the body.
func call(method, url, token string, body any) (int, []byte) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, []byte(err.Error())
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil && !errors.Is(err, io.EOF) {
		return resp.StatusCode, []byte(err.Error())
	}
	return resp.StatusCode, data
}
