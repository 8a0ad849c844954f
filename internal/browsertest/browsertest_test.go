package browsertest_test

import (
	"bytes"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/internal/browsertest"
)

const page = `<!doctype html>
<html><head><meta name="viewport" content="width=device-width, initial-scale=1"><title>t</title></head>
<body>
<p id="greeting">nobody yet</p>
<input id="name">
<button id="go" type="button">Greet</button>
<p id="later" hidden>arrived</p>
<script>
document.getElementById("go").addEventListener("click", () => {
  document.getElementById("greeting").textContent = "hello " + document.getElementById("name").value;
  setTimeout(() => { document.getElementById("later").hidden = false; document.getElementById("greeting").remove(); }, 2000);
});
</script>
</body></html>`

func TestBrowserDrivesAPage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)

	b := browsertest.New(t)
	b.Open(srv.URL)
	b.WaitText("#greeting", "nobody yet")
	b.WaitExact("#greeting", "nobody yet")
	b.Fill("#name", "operator")
	b.Click("#go")
	b.WaitExact("#greeting", "hello operator")
	b.WaitVisible("#later")
	b.WaitGone("#greeting")
	if got := b.Text("#later"); got != "arrived" {
		t.Fatalf("text %q", got)
	}
	if got := browsertest.Eval[string](b, `document.title`); got != "t" {
		t.Fatalf("title %q", got)
	}
	for _, width := range []int{1280, 390} {
		path := filepath.Join(t.TempDir(), "shot.png")
		b.Screenshot(path, width, 700)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("screenshot is not a PNG: %v", err)
		}
		if cfg.Width != width || cfg.Height < 700 {
			t.Fatalf("screenshot %dx%d, want %d wide and at least 700 high", cfg.Width, cfg.Height, width)
		}
	}
	if off := b.TakeOffLoopback(); len(off) != 0 {
		t.Fatalf("requests off loopback: %v", off)
	}
}

func TestBrowserSeesRequestsOffLoopback(t *testing.T) {
	t.Parallel()
	// 192.0.2.1 is TEST-NET-1: nothing answers, but the request is made.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><p id="p">x</p><img src="http://192.0.2.1/pixel.png">`))
	}))
	t.Cleanup(srv.Close)
	b := browsertest.New(t)
	b.Open(srv.URL)
	b.WaitText("#p", "x")
	off := b.TakeOffLoopback()
	if len(off) != 1 || !strings.Contains(off[0], "192.0.2.1/pixel.png") {
		t.Fatalf("off-loopback requests %v, want the image", off)
	}
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{
		"http://127.0.0.1:8080/ui/":  true,
		"http://localhost/x":         true,
		"http://[::1]:9/":            true,
		"data:image/png;base64,AAAA": true,
		"about:blank":                true,
		"https://fonts.example/x":    false,
		"http://192.168.1.2/":        false,
		"ftp://127.0.0.1/":           false,
		"http://127.0.0.1.evil.test": false,
	} {
		if got := browsertest.Loopback(raw); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", raw, got, want)
		}
	}
}

// No t.Parallel: it sets the environment.
func TestMissingChromiumIsAClearError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-chromium")
	t.Setenv(browsertest.EnvChromium, missing)
	_, err := browsertest.ChromiumPath()
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "make deps-chromium") {
		t.Fatalf("error %v, want one naming %s and how to install chromium", err, missing)
	}
}
