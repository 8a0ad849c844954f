package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// startNASProcess runs `chronos nas --config cfgPath` in process until the
// test ends and waits for /readyz on listen. It returns the log buffer and a
// stop function that ends NAS and returns its exit code.
func startNASProcess(t *testing.T, cfgPath, listen string) (*nasLockedWriter, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &nasLockedWriter{w: &bytes.Buffer{}}
	go func() { done <- run(ctx, []string{"nas", "--config", cfgPath}, io.Discard, logs) }()
	stopped := false
	stop := func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(15 * time.Second):
			t.Fatal("nas did not shut down")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("nas exited %d before it was ready: %s", code, logs.String())
		default:
		}
		if resp, err := client.Get("http://" + listen + contract.PathReadyz); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return logs, stop
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("nas never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// String returns what was written so far.
func (l *nasLockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(*bytes.Buffer).String()
}

// TestNASSignsWithAnExistingEdDSAKeysDir is the upgrade path: a keys dir
// made by an older `chronos keys generate` (EdDSA keys and an `active` file)
// and a config that names no signing_alg start as before and sign with the
// active EdDSA key, and the tokens verify against NAS's JWKS.
func TestNASSignsWithAnExistingEdDSAKeysDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", keys, "--alg", "EdDSA")
	if code != 0 {
		t.Fatal(errOut)
	}
	first := strings.TrimSpace(out)
	code, out, errOut = nasRunCLI(t, "keys", "generate", "--out", keys, "--alg", "EdDSA")
	if code != 0 {
		t.Fatal(errOut)
	}
	active := strings.TrimSpace(out)
	if code, _, errOut := nasRunCLI(t, "keys", "activate", "--dir", keys, active); code != 0 {
		t.Fatal(errOut)
	}
	nasWriteFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+nas.TokenSHA256("tok")+"\n")

	type seen struct{ alg, kid, err string }
	fired := make(chan seen, 1)
	listen := nasFreeAddr(t)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s := seen{}
		resp, err := http.Get("http://" + listen + contract.PathJWKS)
		if err == nil {
			jwks, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var kf keyfunc.Keyfunc
			if kf, err = keyfunc.NewJWKSetJSON(jwks); err == nil {
				var parsed *jwt.Token
				parsed, err = jwt.NewParser(jwt.WithValidMethods([]string{"EdDSA"})).Parse(tok, kf.Keyfunc)
				if err == nil {
					s.alg, _ = parsed.Header["alg"].(string)
					s.kid, _ = parsed.Header["kid"].(string)
				}
			}
		}
		if err != nil {
			s.err = err.Error()
		}
		fired <- s
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(agent.Close)
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, cfgPath, fmt.Sprintf(`listen: %s
public_url: http://%s
signing_keys_dir: keys
agents_file: agents.yaml
allow_private_callbacks: true
relay:
  secrets: [%s]
`, listen, listen, nasTestSecret))

	if code, out, errOut := nasRunCLI(t, "nas", "--config", cfgPath, "--print-config"); code != 0 || !strings.Contains(out, "signing_alg: EdDSA") {
		t.Fatalf("print-config: exit %d %s\n%s", code, errOut, out)
	}
	if code, out, _ := nasRunCLI(t, "keys", "list", "--dir", keys); code != 0 || !strings.Contains(out, active+"  EdDSA  signing") || !strings.Contains(out, first+"  EdDSA  published") {
		t.Fatalf("keys list: %d\n%s", code, out)
	}

	logs, stop := startNASProcess(t, cfgPath, listen)
	at := contract.FormatTime(time.Now().Add(100 * time.Millisecond))
	body := fmt.Sprintf(`{"job_id":"j","fire_at":%q,"agent_callback_url":%q,"dedup_key":"j:%s"}`, at, agent.URL, at)
	req, _ := http.NewRequest("POST", "http://"+listen+contract.PathProvision, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("provision: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case s := <-fired:
		if s.err != "" || s.alg != "EdDSA" || s.kid != active {
			t.Fatalf("fire token: alg %q kid %q (want EdDSA %s): %s", s.alg, s.kid, active, s.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fire never arrived")
	}
	if code := stop(); code != 0 {
		t.Fatalf("nas exited %d", code)
	}
	if l := logs.String(); !strings.Contains(l, `"signing_alg":"EdDSA"`) || !strings.Contains(l, `"kid":"`+active+`"`) {
		t.Fatalf("start log does not name the dir's algorithm and key:\n%s", l)
	}
}

// TestNASWeakSettings: a short operator token and a keys dir or key file
// others may write stop NAS at start with an error naming the problem; an
// http public_url outside development starts with a warning.
func TestNASWeakSettings(t *testing.T) {
	t.Parallel()
	base := func(t *testing.T, dir, listen string) string {
		nasWriteFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+nas.TokenSHA256("tok")+"\n")
		return fmt.Sprintf("listen: %s\nagents_file: agents.yaml\nrelay:\n  secrets: [%s]\n  dispatchers: 0\n", listen, nasTestSecret)
	}
	t.Run("short operator token", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		nasWriteFile(t, filepath.Join(dir, "op"), "x\n")
		cfg := filepath.Join(dir, "nas.yaml")
		nasWriteFile(t, cfg, base(t, dir, nasFreeAddr(t))+"public_url: https://nas.example.com\noperator_token_file: op\n")
		code, _, errOut := nasRunCLI(t, "nas", "--config", cfg)
		if code != exitUsage || !strings.Contains(errOut, "operator_token") || !strings.Contains(errOut, "at least 16") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	for _, tc := range []struct {
		name  string
		loose func(keys, kid string) string
	}{
		{"world-writable keys dir", func(keys, _ string) string { return keys }},
		{"group-writable key file", func(keys, kid string) string { return filepath.Join(keys, kid+".pem") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			keys := filepath.Join(dir, "keys")
			code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", keys, "--activate")
			if code != 0 {
				t.Fatal(errOut)
			}
			path := tc.loose(keys, strings.TrimSpace(out))
			mode := os.FileMode(0o777)
			if path != keys {
				mode = 0o660
			}
			if err := os.Chmod(path, mode); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "nas.yaml")
			nasWriteFile(t, cfg, base(t, dir, nasFreeAddr(t))+"public_url: https://nas.example.com\nsigning_keys_dir: keys\n")
			code, _, errOut = nasRunCLI(t, "nas", "--config", cfg)
			if code != exitFailure || !strings.Contains(errOut, path) || !strings.Contains(errOut, "writable by group or others") {
				t.Fatalf("exit %d: %s", code, errOut)
			}
		})
	}
	t.Run("http public_url outside development", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		listen := nasFreeAddr(t)
		cfg := filepath.Join(dir, "nas.yaml")
		nasWriteFile(t, cfg, base(t, dir, listen)+"public_url: http://nas.example.com\n")
		logs, stop := startNASProcess(t, cfg, listen)
		if code := stop(); code != 0 {
			t.Fatalf("nas exited %d", code)
		}
		if l := logs.String(); !strings.Contains(l, `"level":"WARN","msg":"public_url: http://nas.example.com is plain http`) {
			t.Fatalf("no warning about the http public_url:\n%s", l)
		}
	})
}

// TestKeysGenerateDefaultsAndModes: with no --alg the key is ES256; the dir
// is created 0700 and the key 0600; an existing dir others may write is
// refused and gets no key.
func TestKeysGenerateDefaultsAndModes(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "new", "keys")
	code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", dir, "--activate")
	if code != 0 {
		t.Fatal(errOut)
	}
	kid := strings.TrimSpace(out)
	set, err := nas.LoadKeyDir(dir, "")
	if err != nil || set.Active.KID != kid || set.Active.Alg != nas.AlgES256 {
		t.Fatalf("default key: %+v %v", set, err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, kid+".pem"): 0o600, filepath.Join(dir, nas.ActiveKeyFile): 0o600} {
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (%v)", path, info.Mode().Perm(), want, err)
		}
	}
	loose := t.TempDir()
	if err := os.Chmod(loose, 0o777); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = nasRunCLI(t, "keys", "generate", "--out", loose)
	if code == 0 || !strings.Contains(errOut, "chmod go-w") {
		t.Fatalf("loose dir: exit %d %s", code, errOut)
	}
	if entries, _ := os.ReadDir(loose); len(entries) != 0 {
		t.Fatalf("a key was written to a loose dir: %v", entries)
	}
}

// TestNASNewKeysFromTheEnvironment: relay.retry.max_auth_attempts and
// agent_jwt.session_claim come from their variables, and default otherwise.
func TestNASNewKeysFromTheEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"CHRONOS_NAS_PUBLIC_URL": "https://nas.example.com", "CHRONOS_NAS_AGENTS_FILE": "a.yaml",
		"CHRONOS_NAS_RELAY_SECRETS": nasTestSecret,
	}
	cfg, err := nas.LoadConfig("", nasEnvFrom(env))
	if err != nil || cfg.Relay.Retry.MaxAuthAttempts != 4 || cfg.AgentJWT.SessionClaim != "sid" {
		t.Fatalf("defaults: %+v %+v %v", cfg.Relay.Retry, cfg.AgentJWT, err)
	}
	env["CHRONOS_NAS_RELAY_RETRY_MAX_AUTH_ATTEMPTS"] = "7"
	env["CHRONOS_NAS_AGENT_JWT_SESSION_CLAIM"] = "session_id"
	cfg, err = nas.LoadConfig("", nasEnvFrom(env))
	if err != nil || cfg.Relay.Retry.MaxAuthAttempts != 7 || cfg.AgentJWT.SessionClaim != "session_id" {
		t.Fatalf("from the environment: %+v %+v %v", cfg.Relay.Retry, cfg.AgentJWT, err)
	}
	env["CHRONOS_NAS_RELAY_RETRY_MAX_AUTH_ATTEMPTS"] = "-1"
	if _, err := nas.LoadConfig("", nasEnvFrom(env)); err == nil || !strings.Contains(err.Error(), "relay.retry.max_auth_attempts") {
		t.Fatalf("negative max_auth_attempts: %v", err)
	}
}

// TestNASPrintConfigShowsNoSecret runs `chronos nas --print-config` as an
// operator would, with every secret written in the file and then read from
// the files the *_file keys name: no secret value is printed either way,
// while the keys stay and the file paths are shown.
func TestNASPrintConfigShowsNoSecret(t *testing.T) {
	t.Parallel()
	const (
		token         = "operator-token-never-printed"
		storePassword = "st0re-pa55-never-printed"
	)
	other := contract.FormatWebhookSecret([]byte("fedcba9876543210fedcba9876543210"))
	store := "redis://chronos:" + storePassword + "@127.0.0.1:6379/0"
	dir := t.TempDir()
	nasWriteFile(t, filepath.Join(dir, "op"), token+"\n")
	nasWriteFile(t, filepath.Join(dir, "store"), store+"\n")
	nasWriteFile(t, filepath.Join(dir, "secrets"), nasTestSecret+"\n"+other+"\n")
	configs := map[string]string{
		"inline": fmt.Sprintf("public_url: https://nas.example.com\nagents_file: a.yaml\noperator_token: %s\nstore: %s\nrelay:\n  secrets: [%s, %s]\n",
			token, store, nasTestSecret, other),
		"files": "public_url: https://nas.example.com\nagents_file: a.yaml\noperator_token_file: op\nstore_file: store\nrelay:\n  secrets_file: secrets\n",
	}
	for name, content := range configs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfgPath := filepath.Join(dir, name+".yaml")
			nasWriteFile(t, cfgPath, content)
			code, out, errOut := nasRunCLI(t, "nas", "--config", cfgPath, "--print-config")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, secret := range []string{token, storePassword, nasTestSecret, other} {
				if strings.Contains(out, secret) {
					t.Errorf("secret %q printed:\n%s", secret, out)
				}
			}
			for _, want := range []string{"operator_token: <redacted>", "secrets: [<redacted>, <redacted>]", "store: redis://chronos:xxxxx@127.0.0.1:6379/0"} {
				if !strings.Contains(out, want) {
					t.Errorf("missing %q:\n%s", want, out)
				}
			}
			if name == "files" && !strings.Contains(out, "operator_token_file: "+filepath.Join(dir, "op")) {
				t.Errorf("the token file's path is not shown:\n%s", out)
			}
		})
	}
}

// TestNASRefusesASecretSetTwice: a secret given itself and through its
// *_file key is a usage error naming both keys, and NAS does not start.
func TestNASRefusesASecretSetTwice(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nasWriteFile(t, filepath.Join(dir, "op"), "operator-token-from-the-file\n")
	cfgPath := filepath.Join(dir, "nas.yaml")
	nasWriteFile(t, cfgPath, fmt.Sprintf("public_url: https://nas.example.com\nagents_file: a.yaml\noperator_token: operator-token-in-the-file\noperator_token_file: op\nrelay:\n  secrets: [%s]\n", nasTestSecret))
	code, _, errOut := nasRunCLI(t, "nas", "--config", cfgPath, "--print-config")
	if code != exitUsage || !strings.Contains(errOut, "operator_token and operator_token_file are both set") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
