package secretfile_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/internal/secretfile"
)

// writeMode writes data to a new file in a temporary directory and sets its
// mode exactly (the umask does not apply to chmod).
func writeMode(t *testing.T, data string, mode fs.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadWarns: a secret file its group or others may read is read and
// reported, with its mode and the fix, once; a private one is read and not
// reported.
func TestReadWarns(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	for _, tc := range []struct {
		mode    fs.FileMode
		exposed bool
	}{
		{0o644, true},
		{0o640, true},
		{0o604, true},
		{0o660, true},
		{0o600, false},
		{0o400, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			path := writeMode(t, "s3cret\n", tc.mode)
			data, e, err := secretfile.Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != "s3cret\n" {
				t.Fatalf("read %q", data)
			}
			if (e != nil) != tc.exposed {
				t.Fatalf("exposure = %v, want exposed %v", e, tc.exposed)
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			var w secretfile.Warner
			logged := w.Warn(log, e)
			if logged != tc.exposed {
				t.Fatalf("Warn logged %v, want %v", logged, tc.exposed)
			}
			if !tc.exposed {
				if buf.Len() != 0 {
					t.Fatalf("a private file was warned about: %s", buf.String())
				}
				return
			}
			out := buf.String()
			for _, want := range []string{"level=WARN", "file=" + path, "mode=" + modeText(tc.mode), "chmod 600 " + path} {
				if !strings.Contains(out, want) {
					t.Errorf("warning %q lacks %q", out, want)
				}
			}
			if w.Warn(log, e) {
				t.Fatal("the same exposure was warned about twice")
			}
			if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
				t.Fatalf("%d warnings, want 1: %s", n, buf.String())
			}
		})
	}
}

// modeText is a mode as the warning writes it.
func modeText(m fs.FileMode) string {
	b, _ := json.Marshal(secretfile.Exposure{Mode: m})
	var v struct{ Mode string }
	_ = json.Unmarshal(b, &v)
	return v.Mode
}

// TestWarnAgainOnModeChange: a file whose mode changes is reported again; a
// nil exposure never is.
func TestWarnAgainOnModeChange(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var w secretfile.Warner
	if w.Warn(log, nil) {
		t.Fatal("nil exposure logged")
	}
	steps := []struct {
		mode fs.FileMode
		want bool
	}{{0o644, true}, {0o644, false}, {0o640, true}, {0o640, false}}
	for _, s := range steps {
		if got := w.Warn(log, &secretfile.Exposure{Path: "/etc/x", Mode: s.mode}); got != s.want {
			t.Fatalf("mode %04o: logged %v, want %v", s.mode, got, s.want)
		}
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 {
		t.Fatalf("%d warnings, want 2: %s", n, buf.String())
	}
}

// TestExposureText: the text and JSON name the file, the octal mode and the
// fix.
func TestExposureText(t *testing.T) {
	e := secretfile.Exposure{Path: "/etc/chronos/token", Mode: 0o644}
	if got, want := e.String(), "secret file /etc/chronos/token is readable by group or others (mode 0644): run chmod 600 /etc/chronos/token"; got != want {
		t.Fatalf("String = %q, want %q", got, want)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"path":"/etc/chronos/token","mode":"0644","fix":"chmod 600 /etc/chronos/token"}`; got != want {
		t.Fatalf("JSON = %s, want %s", got, want)
	}
}

// TestInspect: Inspect reports as Read does without reading; a missing file
// is fs.ErrNotExist and nothing is created.
func TestInspect(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes do not say who may read a file on Windows")
	}
	open := writeMode(t, "x", 0o640)
	if e, err := secretfile.Inspect(open); err != nil || e == nil || e.Mode != 0o640 || e.Path != open {
		t.Fatalf("Inspect(0640) = %+v, %v", e, err)
	}
	private := writeMode(t, "x", 0o600)
	if e, err := secretfile.Inspect(private); err != nil || e != nil {
		t.Fatalf("Inspect(0600) = %+v, %v", e, err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := secretfile.Inspect(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Inspect(missing) = %v, want fs.ErrNotExist", err)
	}
	if _, _, err := secretfile.Read(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read(missing) = %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a missing secret file was created")
	}
}
