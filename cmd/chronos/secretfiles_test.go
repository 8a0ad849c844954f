package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// fileMode returns path's permission bits.
func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// TestKeysCommandsSecretModes: keys generate makes the dir 0700 and the key
// 0600; keys activate leaves the active file 0600 also over one of mode
// 0644; keys list lists a key of mode 0644 and warns on stderr with the fix.
func TestKeysCommandsSecretModes(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	code, out, errOut := nasRunCLI(t, "keys", "generate", "--out", dir)
	if code != 0 {
		t.Fatalf("generate: exit %d %s", code, errOut)
	}
	kid := strings.TrimSpace(out)
	key := filepath.Join(dir, kid+".pem")
	if got := fileMode(t, dir); got != 0o700 {
		t.Errorf("keys dir mode %04o, want 0700", got)
	}
	if got := fileMode(t, key); got != 0o600 {
		t.Errorf("key mode %04o, want 0600", got)
	}

	active := filepath.Join(dir, nas.ActiveKeyFile)
	nasWriteFile(t, active, "old\n")
	if err := os.Chmod(active, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := nasRunCLI(t, "keys", "activate", "--dir", dir, kid); code != 0 {
		t.Fatalf("activate: exit %d %s", code, errOut)
	}
	if got := fileMode(t, active); got != 0o600 {
		t.Errorf("active mode %04o after activate over a 0644 file, want 0600", got)
	}

	code, out, errOut = nasRunCLI(t, "keys", "list", "--dir", dir)
	if code != 0 || !strings.Contains(out, kid) || errOut != "" {
		t.Fatalf("list of a 0600 key: exit %d out %q stderr %q", code, out, errOut)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = nasRunCLI(t, "keys", "list", "--dir", dir)
	if code != 0 || !strings.Contains(out, kid) {
		t.Fatalf("list of a 0644 key: exit %d out %q stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "warning:") || !strings.Contains(errOut, "mode 0644") || !strings.Contains(errOut, "chmod 600 "+key) {
		t.Fatalf("list of a 0644 key warns %q", errOut)
	}
}

// TestNASWarnsOfExposedOperatorToken: NAS started with an operator token
// file of mode 0644 starts, serves, and logs one warning naming the file,
// its mode and the fix.
func TestNASWarnsOfExposedOperatorToken(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	dir := t.TempDir()
	token := filepath.Join(dir, "operator-token")
	nasWriteFile(t, token, nasOpToken+"\n")
	if err := os.Chmod(token, 0o644); err != nil {
		t.Fatal(err)
	}
	nasWriteFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+nas.TokenSHA256("tok")+"\n")
	listen := nasFreeAddr(t)
	nasWriteFile(t, filepath.Join(dir, "nas.yaml"), fmt.Sprintf(`listen: %s
public_url: http://%s
agents_file: agents.yaml
operator_token_file: operator-token
relay:
  secrets: [%s]
  dispatchers: 1
`, listen, listen, nasTestSecret))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var logs bytes.Buffer
	go func() {
		done <- run(ctx, []string{"nas", "--config", filepath.Join(dir, "nas.yaml")}, io.Discard, &nasLockedWriter{w: &logs})
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for ready := false; !ready; {
		select {
		case code := <-done:
			t.Fatalf("nas exited %d before it was ready", code)
		default:
		}
		if resp, err := client.Get("http://" + listen + contract.PathReadyz); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
		if !ready && time.Now().After(deadline) {
			t.Fatal("nas never became ready")
		}
		if !ready {
			time.Sleep(10 * time.Millisecond)
		}
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
	var warned []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == "WARN" && rec["file"] == token {
			warned = append(warned, rec)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d warnings naming %s, want 1:\n%s", len(warned), token, logs.String())
	}
	if warned[0]["mode"] != "0644" || warned[0]["fix"] != "chmod 600 "+token {
		t.Fatalf("warning %v", warned[0])
	}
}
