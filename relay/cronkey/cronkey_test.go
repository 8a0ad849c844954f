package cronkey_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay/cronkey"
	"github.com/golang-jwt/jwt/v5"
)

func newSealer(t *testing.T) *cronkey.Sealer {
	t.Helper()
	text, err := cronkey.GenerateEncryptionKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := cronkey.ParseEncryptionKey(text)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cronkey.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealOpen(t *testing.T) {
	s := newSealer(t)
	k, err := cronkey.Mint()
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.Seal("agent-a", "job-1", k)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, k.Encoded()) || strings.Contains(sealed, k.ID) {
		t.Fatalf("the sealed form shows the key or its id: %s", sealed)
	}
	got, err := s.Open("agent-a", "job-1", sealed)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || string(got.Secret) != string(k.Secret) {
		t.Fatalf("opened %v, want %v", got, k)
	}
	tests := []struct {
		name, agent, job, sealed string
		sealer                   *cronkey.Sealer
	}{
		{"another job", "agent-a", "job-2", sealed, s},
		{"another agent", "agent-b", "job-1", sealed, s},
		{"another encryption key", "agent-a", "job-1", sealed, newSealer(t)},
		{"tampered", "agent-a", "job-1", sealed[:len(sealed)-2] + "AA", s},
		{"not sealed", "agent-a", "job-1", "plain", s},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.sealer.Open(tc.agent, tc.job, tc.sealed); err != cronkey.ErrOpen {
				t.Fatalf("Open = %v, want ErrOpen", err)
			}
		})
	}
	if strings.Contains(k.String(), k.Encoded()) {
		t.Fatal("String shows the secret")
	}
}

func TestLoadSealer(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, _ := cronkey.GenerateEncryptionKey()
	tests := []struct {
		name, path, wantErr string
	}{
		{"base64", write("b64", good, 0o600), ""},
		{"hex", write("hex", strings.Repeat("ab", 32)+"\n", 0o400), ""},
		{"open permissions", write("open", good, 0o644), "readable by group or others"},
		{"short", write("short", "c2hvcnQ=", 0o600), "not 32 bytes"},
		{"missing", filepath.Join(dir, "none"), "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cronkey.LoadSealer(tc.path)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("LoadSealer: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("LoadSealer = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestSignVerifies(t *testing.T) {
	k, _ := cronkey.Mint()
	now := time.Now()
	claims := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{Issuer: "https://nas.test", Audience: contract.Audience("i-1"), Purpose: contract.PurposeCronFire,
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(contract.DirectTokenLifetimeSeconds * time.Second)), ID: "j1"},
		JobID: "job-1", FireAt: "2026-11-30T09:00:00Z", ScheduleID: "s1", Attempt: 1, BodyHash: contract.BodyHash([]byte("{}")),
	}
	tok, err := cronkey.Sign(k, claims)
	if err != nil {
		t.Fatal(err)
	}
	var got contract.FireClaims
	parsed, err := jwt.ParseWithClaims(tok, &got, func(tk *jwt.Token) (any, error) {
		if tk.Header["kid"] != k.ID || tk.Header["typ"] != contract.TokenTypeCronFire {
			t.Errorf("header %v", tk.Header)
		}
		return k.Secret, nil
	}, jwt.WithValidMethods([]string{contract.DirectTokenAlg}))
	if err != nil || !parsed.Valid || got.JobID != "job-1" {
		t.Fatalf("verify: %v %+v", err, got)
	}
	other, _ := cronkey.Mint()
	if _, err := jwt.ParseWithClaims(tok, &contract.FireClaims{}, func(*jwt.Token) (any, error) { return other.Secret, nil },
		jwt.WithValidMethods([]string{contract.DirectTokenAlg})); err == nil {
		t.Fatal("a token verified under another job's key")
	}
}
