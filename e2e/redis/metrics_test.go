package redise2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// documentedRelayMetrics reads the chronos_relay_* metrics the README's
// Operations section lists, each with its documented label names (none
// when it names none), and checks that docs/operations.md names no other.
func documentedRelayMetrics(t *testing.T) map[string][]string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, ops, ok := strings.Cut(string(readme), "\n## Operations\n")
	if !ok {
		t.Fatal("README has no Operations section")
	}
	ops, _, _ = strings.Cut(ops, "\n## ")
	re := regexp.MustCompile(`chronos_relay_[a-z_]+(\{[a-z_,]+\})?`)
	doc := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(ops, -1) {
		name, _, _ := strings.Cut(m[0], "{")
		var labels []string
		if m[1] != "" {
			labels = strings.Split(strings.Trim(m[1], "{}"), ",")
			sort.Strings(labels)
		}
		doc[name] = labels
	}
	if len(doc) == 0 {
		t.Fatal("the README's Operations section names no chronos_relay_ metric")
	}
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range re.FindAllStringSubmatch(string(guide), -1) {
		name, _, _ := strings.Cut(m[0], "{")
		if _, ok := doc[name]; !ok {
			t.Errorf("docs/operations.md names %s, which the README's Operations section does not list", name)
		}
	}
	return doc
}

// scrapedFamilies reads a Prometheus text exposition: each chronos_relay_
// metric family with the label names of its samples (le of histogram
// buckets left out).
func scrapedFamilies(t *testing.T, text string) map[string][]string {
	t.Helper()
	kinds := map[string]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(rest, " ")
			kinds[name] = kind
		}
	}
	labelRe := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	out := map[string][]string{}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") || !strings.HasPrefix(line, "chronos_relay_") {
			continue
		}
		sample, labels, _ := strings.Cut(strings.Fields(line)[0], "{")
		family := sample
		if _, ok := kinds[family]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := strings.CutSuffix(sample, suffix); ok && kinds[f] == "histogram" {
					family = f
				}
			}
		}
		var names []string
		for _, m := range labelRe.FindAllStringSubmatch(labels, -1) {
			if m[1] != "le" {
				names = append(names, m[1])
			}
		}
		sort.Strings(names)
		if prev, seen := out[family]; seen && !slices.Equal(prev, names) {
			t.Errorf("%s: samples with label names %v and %v", family, prev, names)
		}
		out[family] = names
	}
	return out
}

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b)
}

// startRelayOps starts `chronos relay` on the config of NAS name with its
// health and metrics on a free address, and returns that address's URL.
func (c *cluster) startRelayOps(name, nasName string) (*proc, string) {
	c.t.Helper()
	ops := "http://" + freeAddr(c.t)
	p := startProc(c.t, name, c.dir, "relay", "--config", nasName+".yaml", "--dispatchers", "1",
		"--listen", strings.TrimPrefix(ops, "http://"))
	waitReady(c.t, p, ops+contract.PathReadyz, 30*time.Second)
	return p, ops
}

// TestRelayMetricsAreTheDocumentedOnes scrapes `chronos nas` (with
// dispatchers of its own) and `chronos relay` on one Redis store: both
// serve every chronos_relay_ metric the README lists, with the documented
// labels, and no other.
func TestRelayMetricsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	doc := documentedRelayMetrics(t)
	srv := redistest.Start(t, redistest.Options{})
	c := newCluster(t, srv.URL()+"/0?prefix=metrics", 1)
	addr := freeAddr(t)
	nasURL := "http://" + addr
	c.nasConfig("nas.yaml", addr, nasURL)
	cfg, err := os.ReadFile(filepath.Join(c.dir, "nas.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, c.dir, "nas.yaml", strings.Replace(string(cfg), "dispatchers: 0", "dispatchers: 1", 1))
	nas := startProc(t, "nas", c.dir, "nas", "--config", "nas.yaml")
	waitReady(t, nas, nasURL+contract.PathReadyz, 30*time.Second)
	_, relayURL := c.startRelayOps("relay", "nas")

	for _, target := range []struct{ name, url string }{{"chronos nas", nasURL}, {"chronos relay", relayURL}} {
		code, body := get(t, target.url+contract.PathMetrics)
		if code != http.StatusOK {
			t.Fatalf("%s /metrics: %d", target.name, code)
		}
		got := scrapedFamilies(t, body)
		for name, labels := range doc {
			have, ok := got[name]
			if !ok {
				t.Errorf("%s does not serve %s", target.name, name)
				continue
			}
			if !slices.Equal(have, labels) {
				t.Errorf("%s serves %s with labels %v, the README documents %v", target.name, name, have, labels)
			}
		}
		for name := range got {
			if _, ok := doc[name]; !ok {
				t.Errorf("%s serves %s, which the README does not document", target.name, name)
			}
		}
	}
}

// TestFlushedRedisIsReportedByRelay empties redis-server under a running
// `chronos relay` (as a restart without persistence would): its /readyz
// answers 503 naming store_epoch, its chronos_relay_store_lost is 1 and it
// logs the loss as an error, as NAS does, until the report ends.
func TestFlushedRedisIsReportedByRelay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := newCluster(t, srv.URL()+"/0?prefix=lostrelay&lost_report_for=3s", 1)
	_, _ = c.startNAS("nas")
	p, ops := c.startRelayOps("relay", "nas")
	if _, m := get(t, ops+contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 0\n") {
		t.Fatal("relay metrics before FLUSHALL lack chronos_relay_store_lost 0")
	}
	if err := redistest.ClientOf(t, srv.URL()).FlushAll(context.Background()).Err(); err != nil {
		t.Fatalf("flushall: %v", err)
	}
	code, body := get(t, ops+contract.PathReadyz)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"store_epoch":"the store lost its data`) {
		t.Fatalf("relay readyz after FLUSHALL: %d %s, want 503 naming store_epoch", code, body)
	}
	if _, m := get(t, ops+contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 1\n") {
		t.Fatal("relay metrics after FLUSHALL lack chronos_relay_store_lost 1")
	}
	if out := p.out.String(); !strings.Contains(out, `"level":"ERROR","msg":"relay store lost its data`) {
		t.Fatalf("no error log of the lost store:\n%s", lastLines(out, 10))
	}
	deadline := time.Now().Add(15 * time.Second)
	for code, _ := get(t, ops+contract.PathReadyz); code != http.StatusOK; code, _ = get(t, ops+contract.PathReadyz) {
		if time.Now().After(deadline) {
			t.Fatal("relay readyz still failing after the report time")
		}
		time.Sleep(100 * time.Millisecond) // readiness poll interval
	}
	if _, m := get(t, ops+contract.PathMetrics); !strings.Contains(m, "\nchronos_relay_store_lost 0\n") {
		t.Fatal("relay metrics after the report lack chronos_relay_store_lost 0")
	}
}
