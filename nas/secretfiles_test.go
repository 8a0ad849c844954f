package nas_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/nas"
)

// modeOf returns path's permission bits.
func modeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Mode().Perm()
}

// TestLoadConfigExposedSecretFiles: each *_file secret its group or others
// may read is still read, and listed with its mode; a 0600 one is not.
func TestLoadConfigExposedSecretFiles(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	for _, tc := range []struct {
		name, env, content string
		mode               fs.FileMode
		exposed            bool
	}{
		{"operator token 0644", "CHRONOS_NAS_OPERATOR_TOKEN_FILE", "operator-token-0123456789", 0o644, true},
		{"operator token 0640", "CHRONOS_NAS_OPERATOR_TOKEN_FILE", "operator-token-0123456789", 0o640, true},
		{"operator token 0600", "CHRONOS_NAS_OPERATOR_TOKEN_FILE", "operator-token-0123456789", 0o600, false},
		{"store 0644", "CHRONOS_NAS_STORE_FILE", "memory", 0o644, true},
		{"store 0600", "CHRONOS_NAS_STORE_FILE", "memory", 0o600, false},
		{"relay secrets 0640", "CHRONOS_NAS_RELAY_SECRETS_FILE", loadSecret, 0o640, true},
		{"relay secrets 0600", "CHRONOS_NAS_RELAY_SECRETS_FILE", loadSecret, 0o600, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "secret")
			writeTestFile(t, path, tc.content+"\n")
			chmod(t, path, tc.mode)
			env := baseEnv(map[string]string{tc.env: path})
			if tc.env == "CHRONOS_NAS_RELAY_SECRETS_FILE" {
				delete(env, "CHRONOS_NAS_RELAY_SECRETS")
			}
			cfg, err := nas.LoadConfig("", envOf(env))
			if err != nil {
				t.Fatal(err)
			}
			got := cfg.ExposedSecretFiles()
			if !tc.exposed {
				if len(got) != 0 {
					t.Fatalf("exposed = %v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Path != path || got[0].Mode != tc.mode {
				t.Fatalf("exposed = %v, want %s mode %04o", got, path, tc.mode)
			}
			if after := cfg.WithDefaults().ExposedSecretFiles(); len(after) != 1 {
				t.Fatalf("WithDefaults dropped the exposure: %v", after)
			}
			if modeOf(t, path) != tc.mode {
				t.Fatal("reading the file changed its mode")
			}
		})
	}
}

// TestLoadKeyDirExposed: a key file its group or others may read is loaded
// and listed in Exposed; the writers leave 0600 files in a 0700 dir.
func TestLoadKeyDirExposed(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "keys")
	k, err := nas.GenerateKey(nas.AlgES256)
	if err != nil {
		t.Fatal(err)
	}
	if err := nas.WriteKeyFile(dir, k); err != nil {
		t.Fatal(err)
	}
	keyPath := filepath.Join(dir, k.KID+".pem")
	if got := modeOf(t, dir); got != secretfile.DirPerm {
		t.Fatalf("keys dir mode %04o, want 0700", got)
	}
	if got := modeOf(t, keyPath); got != secretfile.Perm {
		t.Fatalf("key file mode %04o, want 0600", got)
	}
	set, err := nas.LoadKeyDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Exposed) != 0 {
		t.Fatalf("exposed = %v for a 0600 key", set.Exposed)
	}
	chmod(t, keyPath, 0o644)
	set, err = nas.LoadKeyDir(dir, "")
	if err != nil {
		t.Fatalf("a readable key was refused: %v", err)
	}
	if len(set.Exposed) != 1 || set.Exposed[0].Path != keyPath || set.Exposed[0].Mode != 0o644 {
		t.Fatalf("exposed = %v, want %s mode 0644", set.Exposed, keyPath)
	}
}

// TestActivateKeyReplacesModeWith0600: the active file is 0600 when it is
// made and when it replaces one of mode 0644.
func TestActivateKeyReplacesModeWith0600(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	t.Parallel()
	dir := t.TempDir()
	chmod(t, dir, 0o700)
	active := filepath.Join(dir, nas.ActiveKeyFile)
	if err := nas.ActivateKey(dir, "first"); err != nil {
		t.Fatal(err)
	}
	if got := modeOf(t, active); got != 0o600 {
		t.Fatalf("new active file mode %04o, want 0600", got)
	}
	chmod(t, active, 0o644)
	if err := nas.ActivateKey(dir, "second"); err != nil {
		t.Fatal(err)
	}
	if got := modeOf(t, active); got != 0o600 {
		t.Fatalf("replaced active file mode %04o, want 0600", got)
	}
	if b, err := os.ReadFile(active); err != nil || string(b) != "second\n" {
		t.Fatalf("active = %q, %v", b, err)
	}
}
