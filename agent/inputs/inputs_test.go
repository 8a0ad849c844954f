package inputs_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/inputs"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestLines(t *testing.T) {
	got := inputs.Lines([]byte("# header\n a \n\n#b\nc\r\n  \n"))
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("Lines = %q", got)
	}
}

func TestFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "t.txt")
	if err := os.WriteFile(p, []byte("x\n# no\ny\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.txt")
	if err := os.WriteFile(big, []byte(strings.Repeat("a\n", inputs.MaxBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := inputs.New(inputs.Options{})
	got, err := s.Resolve(t.Context(), "file://"+p)
	if err != nil || !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	for raw, want := range map[string]string{
		"file://" + big:              "larger than",
		"file://" + dir + "/missing": "no such file",
		"file://host/" + p:           "local file",
		"file:rel.txt":               "absolute",
		"ftp://example.com/items":    "scheme must be",
		"file://" + p + "?x=1":       "no query",
		"":                           "empty",
	} {
		if _, err := s.Resolve(t.Context(), raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%q) = %v, want %q", raw, err, want)
		}
	}
}

func TestHTTP(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("/plain", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "a\n#c\nb\n")
	})
	mux.HandleFunc("/json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `["x"," ","y z"]`)
	})
	mux.HandleFunc("/html", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<p>")
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("a\n", inputs.MaxBytes))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/plain", http.StatusFound)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	// The default policy refuses the loopback server, at check and at fetch.
	strict := inputs.New(inputs.Options{})
	if err := strict.Check(t.Context(), srv.URL+"/plain"); !errors.Is(err, notify.ErrAddressNotAllowed) || !errors.Is(err, inputs.ErrInvalid) {
		t.Fatalf("Check of a loopback URL: %v", err)
	}
	loopback := notify.AddressPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	// A timeout that a loaded machine does not reach for the answers that
	// come at once, and a short one for the answer that never comes.
	allowed := inputs.New(inputs.Options{Addresses: loopback, Timeout: 30 * time.Second})
	hasty := inputs.New(inputs.Options{Addresses: loopback, Timeout: 300 * time.Millisecond})
	for path, want := range map[string][]string{"/plain": {"a", "b"}, "/json": {"x", "y z"}} {
		got, err := allowed.Resolve(t.Context(), srv.URL+path)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}
	for path, want := range map[string]string{"/html": "content type", "/big": "larger than", "/redirect": "status 302"} {
		if _, err := allowed.Resolve(t.Context(), srv.URL+path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	if _, err := hasty.Resolve(t.Context(), srv.URL+"/slow"); err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("/slow: %v, want a timeout", err)
	}
}

type outputs map[string]string

func (o outputs) LatestSuccessOutput(_ context.Context, job string, _ time.Time) (string, bool, error) {
	p, ok := o[job]
	return p, ok, nil
}

func TestJob(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "out.log")
	if err := os.WriteFile(p, []byte("sub1.example.com\nsub2.example.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	quiet := filepath.Join(filepath.Dir(p), "never-written.log") // the run printed nothing
	s := inputs.New(inputs.Options{Jobs: outputs{"subs": p, "quiet": quiet}})
	got, err := s.Resolve(t.Context(), "job://subs?output_as_lines&window=24h")
	if err != nil || !slices.Equal(got, []string{"sub1.example.com", "sub2.example.com"}) {
		t.Fatalf("Resolve = %q, %v", got, err)
	}
	if got, err := s.Resolve(t.Context(), "job://quiet?output_as_lines"); err != nil || len(got) != 0 {
		t.Fatalf("a run with no output: %q, %v; want no lines", got, err)
	}
	for raw, want := range map[string]string{
		"job://none?output_as_lines":            "no successful run",
		"job://subs":                            "output_as_lines",
		"job://subs?output_as_lines&x=1":        "unknown parameter",
		"job://subs?output_as_lines&window=-1h": "positive duration",
		"job://a!b?output_as_lines":             "job id",
	} {
		if _, err := s.Resolve(t.Context(), raw); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Resolve(%q) = %v, want %q", raw, err, want)
		}
	}
}

func seed(t *testing.T, driver, source string) {
	t.Helper()
	db, err := sql.Open(driver, source)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"DROP TABLE IF EXISTS targets",
		"CREATE TABLE targets (url TEXT, enabled INTEGER, n INTEGER)",
		"INSERT INTO targets VALUES ('https://a.example', 1, 1), ('https://b.example', 0, 2), ('https://c.example', 1, 3), (NULL, 1, 4)",
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestSQL(t *testing.T) {
	t.Parallel()
	lite := filepath.Join(t.TempDir(), "t.db")
	seed(t, inputs.DriverSQLite, lite)
	pg := pgtest.URL(t)
	seed(t, inputs.DriverPostgres, pg)
	for name, value := range map[string]string{"lite": "sqlite:" + lite, "pg": pg} {
		t.Run(name, func(t *testing.T) {
			d, err := inputs.ParseDSN(name, value)
			if err != nil {
				t.Fatal(err)
			}
			s := inputs.New(inputs.Options{SQL: map[string]inputs.DSN{name: d}})
			got, err := s.Resolve(t.Context(), "sql://"+name+"?SELECT url, n FROM targets WHERE enabled = 1 ORDER BY n")
			if err != nil || !slices.Equal(got, []string{"https://a.example", "https://c.example"}) {
				t.Fatalf("Resolve = %q, %v", got, err)
			}
			ints, err := s.Resolve(t.Context(), "sql://"+name+"?SELECT n FROM targets ORDER BY n")
			if err != nil || !slices.Equal(ints, []string{"1", "2", "3", "4"}) {
				t.Fatalf("numbers = %q, %v", ints, err)
			}
			if _, err := s.Resolve(t.Context(), "sql://"+name+"?SELECT nope FROM targets"); err == nil {
				t.Fatal("a bad query resolved")
			}
			if err := s.Check(t.Context(), "sql://other?SELECT 1"); !errors.Is(err, inputs.ErrInvalid) || !strings.Contains(err.Error(), "not registered") {
				t.Fatalf("unregistered name: %v", err)
			}
			if err := s.Check(t.Context(), "sql://"+name); err == nil || !strings.Contains(err.Error(), "no query") {
				t.Fatalf("no query: %v", err)
			}
			// Inputs only read: a write is refused when the job is added and
			// when it would run, and the table keeps its rows.
			for _, q := range []string{"DELETE FROM targets RETURNING url", "WITH d AS (DELETE FROM targets RETURNING url) SELECT url FROM d",
				"SELECT url FROM targets; DROP TABLE targets"} {
				raw := "sql://" + name + "?" + url.QueryEscape(q)
				if err := s.Check(t.Context(), raw); !errors.Is(err, inputs.ErrInvalid) {
					t.Errorf("Check(%q) = %v, want ErrInvalid", q, err)
				}
				if got, err := s.Resolve(t.Context(), raw); !errors.Is(err, inputs.ErrInvalid) {
					t.Errorf("Resolve(%q) = %q, %v, want ErrInvalid", q, got, err)
				}
			}
			if n, err := s.Resolve(t.Context(), "sql://"+name+"?SELECT count(*) FROM targets"); err != nil || !slices.Equal(n, []string{"4"}) {
				t.Fatalf("rows after the refused writes: %q, %v", n, err)
			}
		})
	}
}

func TestParseDSN(t *testing.T) {
	for _, c := range []struct{ name, value, want string }{
		{"a", "mysql://x", "want sqlite:PATH"},
		{"a", "sqlite:", "needs a path"},
		{"a b", "sqlite:/x", "must match"},
	} {
		if _, err := inputs.ParseDSN(c.name, c.value); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseDSN(%q, %q) = %v, want %q", c.name, c.value, err, c.want)
		}
	}
}
