package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/envconfig"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// nasOpToken is an operator token long enough for NAS to accept.
const nasOpToken = "operator-token-of-the-tests"

var nasTestSecret = contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))

func nasRunCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func nasEnvFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestNASConfigLoading(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, cfgPath, "listen: 127.0.0.1:9000\npublic_url: https://nas.example.com\nagents_file: agents.yaml\nlimits:\n  burst: 5\nrelay:\n  dispatchers: 0\n")
	nasWriteFile(t, filepath.Join(dir, "op"), "  op-secret-from-a-file \n")
	nasWriteFile(t, filepath.Join(dir, "secrets"), nasTestSecret+"\n\n# old one\n")
	cfg, err := nas.LoadConfig(cfgPath, nasEnvFrom(map[string]string{
		"CHRONOS_NAS_LIMITS_BURST":            "9",
		"CHRONOS_NAS_OPERATOR_TOKEN_FILE":     filepath.Join(dir, "op"),
		"CHRONOS_NAS_RELAY_SECRETS_FILE":      filepath.Join(dir, "secrets"),
		"CHRONOS_NAS_CALLBACK_ALLOWLIST":      "10.0.0.0/8, agents.internal",
		"CHRONOS_NAS_DELIVERY_TIMEOUT":        "12s",
		"CHRONOS_NAS_ALLOW_PRIVATE_CALLBACKS": "true",
	}))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cfg.Listen != "127.0.0.1:9000", cfg.Limits.Burst != 9, cfg.OperatorToken != "op-secret-from-a-file",
		len(cfg.Relay.Secrets) != 1, len(cfg.CallbackAllowlist) != 2, cfg.DeliveryTimeout != 12*time.Second,
		!cfg.AllowPrivateCallbacks, *cfg.Relay.Dispatchers != 0, cfg.Limits.MaxArmedPerAgent != 1000:
		t.Fatalf("config %+v", cfg)
	}
	// Env alone is enough; relay secrets are comma separated; the operator
	// token is trimmed.
	cfg, err = nas.LoadConfig("", nasEnvFrom(map[string]string{
		"CHRONOS_NAS_PUBLIC_URL": "https://nas.example.com", "CHRONOS_NAS_AGENTS_FILE": "a.yaml",
		"CHRONOS_NAS_RELAY_SECRETS": nasTestSecret + "," + nasTestSecret, "CHRONOS_NAS_RELAY_DISPATCHERS": "3",
		"CHRONOS_NAS_OPERATOR_TOKEN": " op-env-0123456789abc\n",
	}))
	if err != nil || len(cfg.Relay.Secrets) != 2 || *cfg.Relay.Dispatchers != 3 || cfg.OperatorToken != "op-env-0123456789abc" {
		t.Fatalf("env config: %+v %v", cfg, err)
	}
	// Every key has its own variable.
	seen := map[string]bool{}
	for _, f := range envconfig.Fields(&cfg, nas.EnvPrefix) {
		if seen[f.Env] {
			t.Errorf("variable %s names two keys", f.Env)
		}
		seen[f.Env] = true
	}
	for _, bad := range []string{"listen: [", "no_such_key: 1\n"} {
		nasWriteFile(t, cfgPath, bad)
		if _, err := nas.LoadConfig(cfgPath, nasEnvFrom(nil)); err == nil {
			t.Errorf("config %q loaded", bad)
		}
	}
	if _, err := nas.LoadConfig("", nasEnvFrom(map[string]string{"CHRONOS_NAS_LIMITS_BURST": "many"})); err == nil || !strings.Contains(err.Error(), "CHRONOS_NAS_LIMITS_BURST") {
		t.Errorf("bad env value: %v", err)
	}
}

func nasWriteFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestNASPrintConfig is the config reference check: every key of nas.Config
// is printed with its variable, and secrets never are.
func TestNASPrintConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, cfgPath, fmt.Sprintf("public_url: https://nas.example.com\nagents_file: a.yaml\noperator_token: topsecret-0123456789\nrelay:\n  secrets: [%s]\n", nasTestSecret))
	code, out, errOut := nasRunCLI(t, "nas", "--config", cfgPath, "--print-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "topsecret-0123456789") || strings.Contains(out, nasTestSecret) {
		t.Fatal("a secret was printed")
	}
	var cfg nas.Config
	for _, f := range envconfig.Fields(&cfg, nas.EnvPrefix) {
		leaf := f.Key[strings.LastIndex(f.Key, ".")+1:]
		if !strings.Contains(out, leaf+":") || !strings.Contains(out, f.Env) {
			t.Errorf("key %s (%s) missing from --print-config", f.Key, f.Env)
		}
	}
	if code, _, _ := nasRunCLI(t, "nas", "--config", filepath.Join(dir, "missing.yaml")); code != exitUsage {
		t.Errorf("missing config: exit %d", code)
	}
}

func TestKeysGenerateCLI(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	for _, alg := range []string{"EdDSA", "ES256", "RS256"} {
		code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", dir, "--alg", alg)
		if code != 0 {
			t.Fatalf("%s: exit %d %s", alg, code, errOut)
		}
		kid := strings.TrimSpace(out)
		info, err := os.Stat(filepath.Join(dir, kid+".pem"))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("%s: key file %v %v", alg, info, err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, kid+".pem"))
		k, err := nas.ParseKeyPEM(data)
		if err != nil || k.KID != kid || k.Alg != alg {
			t.Fatalf("%s: parsed %+v %v", alg, k, err)
		}
	}
	code, out, _ := nasRunCLI(t, "keys", "list", "--dir", dir)
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, "signing") {
		t.Fatalf("keys list: %d %q", code, out)
	}
	_, out, _ = nasRunCLI(t, "keys", "generate", "--out", dir, "--alg", "ES256")
	next := strings.TrimSpace(out)
	if code, _, errOut := nasRunCLI(t, "keys", "activate", "--dir", dir, next); code != 0 {
		t.Fatalf("activate: %s", errOut)
	}
	set, err := nas.LoadKeyDir(dir, "ES256")
	if err != nil || set.Active.KID != next || len(set.Published) != 4 {
		t.Fatalf("after activate: %v %v", set, err)
	}
	for _, args := range [][]string{
		{"keys", "generate"},
		{"keys", "generate", "--out", dir, "--alg", "HS256"},
		{"keys", "activate", "--dir", dir, "nope"},
		{"keys", "nope"},
	} {
		if code, _, _ := nasRunCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// nasOperatorServer serves NAS's internal handler with one dead letter.
func nasOperatorServer(t *testing.T) (url, scheduleID string, eng *memory.Engine) {
	t.Helper()
	eng = memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	keys, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, _ := nas.NewStaticAgents(nil)
	svc, err := nas.New(nas.Options{
		Config: nas.Config{PublicURL: "https://nas.test", OperatorToken: nasOpToken, Relay: nas.RelayConfig{Secrets: []string{nasTestSecret}}},
		Engine: eng, Verifier: agents, Keys: keys, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(nashttp.NewServer(svc, nashttp.Options{}).InternalHandler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	res, err := eng.Arm(ctx, relay.ArmRequest{AgentID: "agent-a", InstanceID: "i", JobID: "nightly", FireAt: time.Now().Add(-time.Second), CallbackURL: "https://agent.example.com", ScheduleID: "sch-1"})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := eng.Claim(ctx, 1, time.Minute, relay.Flow{})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim %v", err)
	}
	if err := eng.Kill(ctx, leases[0], "agent answered 404"); err != nil {
		t.Fatal(err)
	}
	return srv.URL, res.OneShot.ScheduleID, eng
}

func TestDLQCLI(t *testing.T) {
	t.Parallel()
	url, sch, eng := nasOperatorServer(t)
	code, out, errOut := nasRunCLI(t, "dlq", "list", "--nas-url", url, "--operator-token", nasOpToken, "--json")
	if code != 0 {
		t.Fatalf("list: %d %s", code, errOut)
	}
	var entries []contract.DeadLetter
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 1 || entries[0].ScheduleID != sch {
		t.Fatalf("list --json: %q %v", out, err)
	}
	code, out, _ = nasRunCLI(t, "dlq", "list", "--nas-url", url, "--operator-token", nasOpToken, "--agent", "agent-a")
	if code != 0 || !strings.Contains(out, sch) || !strings.Contains(out, "agent answered 404") {
		t.Fatalf("list: %d %q", code, out)
	}
	code, out, errOut = nasRunCLI(t, "dlq", "list", "--nas-url", url, "--operator-token", nasOpToken, "--agent", "nobody")
	if code != exitFailure || out != "" || !strings.Contains(errOut, "dlq list: nas answered 404: not_found: NAS knows no agent nobody") {
		t.Fatalf("list of nobody: %d %q %q", code, out, errOut)
	}
	code, out, errOut = nasRunCLI(t, "dlq", "replay", "--nas-url", url, "--operator-token", nasOpToken, "sch_nonexistent")
	if code != exitFailure || out != "" || !strings.Contains(errOut, "no dead letter has schedule id sch_nonexistent: nothing was replayed") {
		t.Fatalf("replay of an unknown id: %d %q %q", code, out, errOut)
	}
	if code, out, errOut = nasRunCLI(t, "dlq", "replay", "--nas-url", url, "--operator-token", nasOpToken, sch); code != 0 ||
		!strings.HasPrefix(out, "replayed 1, dropped 0\n") || !strings.Contains(out, sch) || !strings.Contains(out, "replayed: due now") {
		t.Fatalf("replay: %d %q %s", code, out, errOut)
	}
	if _, err := eng.Get(context.Background(), "agent-a", "nightly"); err != nil {
		t.Fatalf("replayed job not armed: %v", err)
	}
	if code, out, _ = nasRunCLI(t, "dlq", "replay", "--nas-url", url, "--operator-token", nasOpToken, "--agent", "agent-a"); code != 0 || out != "replayed 0, dropped 0\n" {
		t.Fatalf("replay --agent: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"dlq", "list", "--operator-token", nasOpToken}, exitUsage},                     // no URL
		{[]string{"dlq", "list", "--nas-url", url}, exitUsage},                                   // no token
		{[]string{"dlq", "replay", "--nas-url", url, "--operator-token", nasOpToken}, exitUsage}, // nothing to replay
		{[]string{"dlq", "replay", "--nas-url", url, "--operator-token", nasOpToken, "--agent", "a", "x"}, exitUsage},
		{[]string{"dlq", "list", "--nas-url", url, "--operator-token", "wrong"}, exitFailure},                                  // 403
		{[]string{"dlq", "list", "--nas-url", "http://" + nasFreeAddr(t), "--operator-token", nasOpToken}, exitFailure},        // unreachable
		{[]string{"dlq", "replay", "--nas-url", "http://" + nasFreeAddr(t), "--operator-token", nasOpToken, sch}, exitFailure}, // unreachable
		{[]string{"dlq", "list", "--nas-url", "ftp://x", "--operator-token", nasOpToken}, exitUsage},
		{[]string{"dlq", "list", "--config", "/nonexistent/nas.yaml"}, exitUsage},
		{[]string{"dlq", "list", "--bogus"}, exitUsage},
		{[]string{"dlq", "list", "extra"}, exitUsage},
	} {
		if code, _, _ := nasRunCLI(t, tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d", tc.args, code, tc.code)
		}
	}
}

func nasFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestNASCommandRuns starts `chronos nas` in process with a keys dir, an
// agents file and a dispatcher, arms a fire for a fake agent, sees it
// delivered, and shuts down cleanly when the context ends.
func TestNASCommandRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if code, _, errOut := nasRunCLI(t, "keys", "generate", "--out", filepath.Join(dir, "keys"), "--alg", "ES256"); code != 0 {
		t.Fatal(errOut)
	}
	nasWriteFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+nas.TokenSHA256("tok")+"\n")
	fired := make(chan string, 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fired <- string(body)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(agent.Close)
	listen, internal := nasFreeAddr(t), nasFreeAddr(t)
	nasWriteFile(t, filepath.Join(dir, "nas.yaml"), fmt.Sprintf(`listen: %s
relay_listen: %s
public_url: http://%s
signing_keys_dir: %s
signing_alg: ES256
agents_file: %s
allow_private_callbacks: true
relay:
  secrets: [%s]
  dispatchers: 1
`, listen, internal, listen, filepath.Join(dir, "keys"), filepath.Join(dir, "agents.yaml"), nasTestSecret))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"nas", "--config", filepath.Join(dir, "nas.yaml")}, io.Discard, &nasLockedWriter{w: &logs})
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + listen + contract.PathReadyz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("nas never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	at := contract.FormatTime(time.Now().Add(100 * time.Millisecond))
	body := fmt.Sprintf(`{"job_id":"j","fire_at":%q,"agent_callback_url":%q,"dedup_key":"j:%s"}`, at, agent.URL, at)
	req, _ := http.NewRequest("POST", "http://"+listen+contract.PathProvision, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("provision: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case b := <-fired:
		if !strings.Contains(b, `"job_id":"j"`) {
			t.Fatalf("fire body %s", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fire never arrived")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("nas exited %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("nas did not shut down")
	}
}

// TestNASStopsWithManyDispatchers shuts down `chronos nas` running more
// in-process dispatchers than it has listeners: every one of them reports
// when it stops, and none may be left blocked on that report.
func TestNASStopsWithManyDispatchers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nasWriteFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+nas.TokenSHA256("tok")+"\n")
	listen := nasFreeAddr(t)
	nasWriteFile(t, filepath.Join(dir, "nas.yaml"), fmt.Sprintf(`listen: %s
public_url: http://%s
agents_file: %s
relay:
  secrets: [%s]
  dispatchers: 6
`, listen, listen, filepath.Join(dir, "agents.yaml"), nasTestSecret))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"nas", "--config", filepath.Join(dir, "nas.yaml")}, io.Discard, io.Discard)
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get("http://" + listen + contract.PathReadyz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("nas never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("nas exited %d", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("nas did not shut down")
	}
}

// TestNASExampleConfig keeps testdata/nas/nas.yaml loadable.
func TestNASExampleConfig(t *testing.T) {
	t.Parallel()
	cfg, err := nas.LoadConfig(filepath.Join("..", "..", "testdata", "nas", "nas.yaml"), nasEnvFrom(nil))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cfg.AgentsFile)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.ParseAgents(data)
	if err != nil || len(agents) != 1 || agents[0].TokenSHA256 != nas.TokenSHA256("dev-agent-token") {
		t.Fatalf("example agents %+v %v", agents, err)
	}
}

// TestNASConfigPathsRelativeToTheFile pins that the file paths of a config
// file are read next to it whatever the working directory, while paths from
// the environment keep the working directory.
func TestNASConfigPathsRelativeToTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "conf", "nas.yaml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o700); err != nil {
		t.Fatal(err)
	}
	nasWriteFile(t, cfgPath, "public_url: https://nas.example.com\nagents_file: agents.yaml\nsigning_keys_dir: keys\noperator_token_file: secret/op\nrelay:\n  secrets_file: /abs/secrets\n")
	if err := os.MkdirAll(filepath.Join(dir, "conf", "secret"), 0o700); err != nil {
		t.Fatal(err)
	}
	nasWriteFile(t, filepath.Join(dir, "conf", "secret", "op"), " op-token-from-the-file\n")
	nasWriteFile(t, filepath.Join(dir, "secrets"), nasTestSecret+"\n")

	cfg, err := nas.LoadConfig(cfgPath, nasEnvFrom(map[string]string{
		"CHRONOS_NAS_RELAY_SECRETS_FILE": filepath.Join(dir, "secrets"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "conf")
	tests := []struct{ key, got, want string }{
		{"agents_file", cfg.AgentsFile, filepath.Join(conf, "agents.yaml")},
		{"signing_keys_dir", cfg.SigningKeysDir, filepath.Join(conf, "keys")},
		{"operator_token_file", cfg.OperatorTokenFile, filepath.Join(conf, "secret", "op")},
		{"operator_token", cfg.OperatorToken, "op-token-from-the-file"},
		{"relay.secrets_file (env)", cfg.Relay.SecretsFile, filepath.Join(dir, "secrets")},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.key, tt.got, tt.want)
		}
	}
	// An environment path is not moved next to the config file.
	cfg, err = nas.LoadConfig(cfgPath, nasEnvFrom(map[string]string{
		"CHRONOS_NAS_AGENTS_FILE":        "rel/agents.yaml",
		"CHRONOS_NAS_RELAY_SECRETS_FILE": filepath.Join(dir, "secrets"),
	}))
	if err != nil || cfg.AgentsFile != "rel/agents.yaml" {
		t.Fatalf("agents_file from the environment = %q (%v)", cfg.AgentsFile, err)
	}
}

// TestDLQCLIReadsNASConfig pins that `chronos dlq --config nas.yaml` finds
// the internal listener and the operator token in NAS's own config file.
func TestDLQCLIReadsNASConfig(t *testing.T) {
	t.Parallel()
	base, sch, _ := nasOperatorServer(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, filepath.Join(dir, "op"), nasOpToken+"\n")
	nasWriteFile(t, cfgPath, fmt.Sprintf("listen: 127.0.0.1:0\nrelay_listen: %s\npublic_url: https://nas.example.com\nagents_file: agents.yaml\noperator_token_file: op\nrelay:\n  secrets: [%s]\n",
		strings.TrimPrefix(base, "http://"), nasTestSecret))
	code, out, errOut := nasRunCLI(t, "dlq", "list", "--config", cfgPath, "--json")
	if code != 0 {
		t.Fatalf("dlq list --config: exit %d: %s", code, errOut)
	}
	var entries []contract.DeadLetter
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 1 || entries[0].ScheduleID != sch {
		t.Fatalf("dlq list --config: %q %v", out, err)
	}
	// A flag still wins over the file.
	if code, _, _ := nasRunCLI(t, "dlq", "list", "--config", cfgPath, "--operator-token", "wrong"); code != exitFailure {
		t.Fatalf("--operator-token over --config: exit %d, want %d", code, exitFailure)
	}
}

// TestNASEnvTypos pins that a CHRONOS_NAS_ variable naming no config key is
// an error naming it, while every key's own variable and the two variables
// that are not keys pass.
func TestNASEnvTypos(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		environ []string
		bad     string // a variable the error must name; "" for no error
	}{
		{name: "keys", environ: []string{"CHRONOS_NAS_OPERATOR_TOKEN=x", "CHRONOS_NAS_RELAY_SECRETS=y", "CHRONOS_NAS_LIMITS_PAST_SKEW=10s", "PATH=/bin"}},
		{name: "not keys but known", environ: []string{"CHRONOS_NAS_URL=http://127.0.0.1:8081", "CHRONOS_NAS_CONFIG=nas.yaml", "CHRONOS_HOME=/tmp"}},
		{name: "typo", environ: []string{"CHRONOS_NAS_OPERATOR_TOKN=x"}, bad: "CHRONOS_NAS_OPERATOR_TOKN"},
		{name: "section without key", environ: []string{"CHRONOS_NAS_LIMITS=1"}, bad: "CHRONOS_NAS_LIMITS"},
		{name: "empty value still counts", environ: []string{"CHRONOS_NAS_SIGNING_ALGO="}, bad: "CHRONOS_NAS_SIGNING_ALGO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := nas.CheckEnv(tt.environ)
			switch {
			case tt.bad == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad)):
				t.Fatalf("error %v does not name %s", err, tt.bad)
			}
		})
	}
}

// TestNASConfigYAMLStrictness pins how a config file is read: unknown keys
// (top level or nested) are errors naming the key and its line, a single
// value for a list key is a one-element list, and an empty file is no keys.
func TestNASConfigYAMLStrictness(t *testing.T) {
	t.Parallel()
	base := "public_url: https://nas.example.com\nagents_file: agents.yaml\n"
	secrets := fmt.Sprintf("relay:\n  secrets: [%s]\n", nasTestSecret)
	tests := []struct {
		name    string
		yaml    string
		wantErr []string // substrings of the error; none for success
		check   func(nas.Config) bool
	}{
		{name: "typo at the top", yaml: base + secrets + "\n\noperator_tokn: x\n", wantErr: []string{"operator_tokn", "line 7"}},
		{name: "typo in a section", yaml: base + secrets + "limits:\n  max_armd: 3\n", wantErr: []string{"max_armd"}},
		{name: "duplicate key", yaml: base + secrets + "agents_file: b.yaml\n", wantErr: []string{"agents_file"}},
		{name: "typo next to a single secret", yaml: base + "relay:\n  secrets: " + nasTestSecret + "\nbogus: 1\n", wantErr: []string{"bogus", "line 5"}},
		{name: "single secret", yaml: base + "relay:\n  secrets: " + nasTestSecret + "\ncallback_allowlist: 10.0.0.0/8\n",
			check: func(c nas.Config) bool {
				return len(c.Relay.Secrets) == 1 && c.Relay.Secrets[0] == nasTestSecret && len(c.CallbackAllowlist) == 1
			}},
		{name: "lists", yaml: base + secrets + "callback_allowlist: [10.0.0.0/8, agents.internal]\n",
			check: func(c nas.Config) bool { return len(c.Relay.Secrets) == 1 && len(c.CallbackAllowlist) == 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "nas.yaml")
			nasWriteFile(t, path, tt.yaml)
			cfg, err := nas.LoadConfig(path, nasEnvFrom(nil))
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatal("loaded")
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("error %q does not mention %q", err, w)
					}
				}
				return
			}
			if err != nil || !tt.check(cfg) {
				t.Fatalf("config %+v %v", cfg, err)
			}
		})
	}
}

// TestDLQConnectionPrecedence pins where the dlq commands find NAS: flags,
// then the config file named with --config, then the environment.
func TestDLQConnectionPrecedence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, cfgPath, fmt.Sprintf("listen: 127.0.0.1:8080\nrelay_listen: 127.0.0.1:8081\npublic_url: https://nas.example.com\nagents_file: a.yaml\noperator_token: from-the-config-file\nrelay:\n  secrets: [%s]\n", nasTestSecret))
	env := map[string]string{"CHRONOS_NAS_URL": "http://env.example:1", "CHRONOS_OPERATOR_TOKEN": "from-env"}
	tests := []struct {
		name             string
		flags            operatorFlags
		env              map[string]string
		wantURL, wantTok string
	}{
		{name: "flags win", flags: operatorFlags{nasURL: "http://flag.example:2", token: "from-flag", config: cfgPath}, env: env,
			wantURL: "http://flag.example:2", wantTok: "from-flag"},
		{name: "config over environment", flags: operatorFlags{config: cfgPath}, env: env,
			wantURL: "http://127.0.0.1:8081", wantTok: "from-the-config-file"},
		{name: "environment alone", env: env, wantURL: "http://env.example:1", wantTok: "from-env"},
		{name: "NAS's own token variable", env: map[string]string{"CHRONOS_NAS_URL": "http://env.example:1", "CHRONOS_NAS_OPERATOR_TOKEN": "nas-env"},
			wantURL: "http://env.example:1", wantTok: "nas-env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := tt.flags
			f.getenv = nasEnvFrom(tt.env)
			c, err := f.client()
			if err != nil {
				t.Fatal(err)
			}
			if c.BaseURL() != tt.wantURL || c.Token() != tt.wantTok {
				t.Fatalf("url %q token %q, want %q %q", c.BaseURL(), c.Token(), tt.wantURL, tt.wantTok)
			}
		})
	}
}

// TestDLQReplayCLIReportsDrops: three dead letters of agent-a, two of whose
// jobs its agent armed again since, and one of agent-b. dlq replay --agent
// prints every entry with what happened to it (one replayed, two dropped
// with the reason), in text and in JSON; a replay naming agent-b's entry and
// an unknown id exits 1 and leaves agent-b's entry in the dead letter.
func TestDLQReplayCLIReportsDrops(t *testing.T) {
	t.Parallel()
	url, _, eng := nasOperatorServer(t) // agent-a's nightly is dead
	ctx := context.Background()
	conn := []string{"--nas-url", url, "--operator-token", nasOpToken}
	kill := func(agent, job string) string {
		t.Helper()
		sch := "sch-" + agent + "-" + job
		if _, err := eng.Arm(ctx, relay.ArmRequest{AgentID: agent, InstanceID: "i-" + agent, JobID: job, FireAt: time.Now().Add(-time.Second),
			CallbackURL: "https://agent.example.com", ScheduleID: sch}); err != nil {
			t.Fatal(err)
		}
		ls, err := eng.Claim(ctx, 10, time.Minute, relay.Flow{})
		if err != nil || len(ls) != 1 {
			t.Fatalf("claim: %d, %v", len(ls), err)
		}
		if err := eng.Kill(ctx, ls[0], "agent answered 410"); err != nil {
			t.Fatal(err)
		}
		return sch
	}
	hourly, weekly := kill("agent-a", "hourly"), kill("agent-a", "weekly")
	other := kill("agent-b", "nightly")
	for _, job := range []string{"hourly", "weekly"} { // agent-a moved on to later slots
		if _, err := eng.Arm(ctx, relay.ArmRequest{AgentID: "agent-a", InstanceID: "i-agent-a", JobID: job, FireAt: time.Now().Add(time.Hour),
			CallbackURL: "https://agent.example.com", ScheduleID: "sch-next-" + job}); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errOut := nasRunCLI(t, append([]string{"dlq", "replay", other, "sch_nonexistent"}, conn...)...)
	if code != exitFailure || out != "" || !strings.Contains(errOut, "sch_nonexistent") {
		t.Fatalf("replay with an unknown id: exit %d %q %q", code, out, errOut)
	}
	code, out, errOut = nasRunCLI(t, append([]string{"dlq", "replay", "--agent", "agent-a"}, conn...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 5 || lines[0] != "replayed 1, dropped 2" || !strings.HasPrefix(lines[1], "SCHEDULE_ID") {
		t.Fatalf("replay --agent agent-a: exit %d %s\n%s", code, errOut, out)
	}
	for _, sch := range []string{hourly, weekly} {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, sch+" ") })
		if i < 0 || !strings.Contains(lines[i], "dropped (job_armed_again): the job was armed again after this fire died") {
			t.Fatalf("%s not reported dropped with its reason:\n%s", sch, out)
		}
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "nightly") && strings.Contains(l, "replayed: due now") }) {
		t.Fatalf("nightly not reported replayed:\n%s", out)
	}
	code, out, _ = nasRunCLI(t, append([]string{"dlq", "list", "--json"}, conn...)...)
	var left []contract.DeadLetter
	if err := json.Unmarshal([]byte(out), &left); code != exitOK || err != nil || len(left) != 1 || left[0].ScheduleID != other {
		t.Fatalf("dead letter after the replays: exit %d %q %v", code, out, err)
	}
	code, out, _ = nasRunCLI(t, append([]string{"dlq", "replay", other, "--json"}, conn...)...)
	var resp contract.DLQReplayResponse
	if err := decodeOne(out, &resp); code != exitOK || err != nil || resp.Replayed != 1 || len(resp.Entries) != 1 || resp.Entries[0].AgentID != "agent-b" ||
		resp.Dropped == nil || len(resp.Dropped) != 0 {
		t.Fatalf("replay --json: exit %d %q %v", code, out, err)
	}
}
