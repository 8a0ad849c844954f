package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
)

// readmeRelayMetrics reads the relay metrics the README documents, each
// with its label names ("" for none).
func readmeRelayMetrics(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range regexp.MustCompile("`(chronos_relay_[a-z_]+)(?:\\{([a-z_,]+)\\})?`").FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = m[2]
	}
	if len(out) < 8 {
		t.Fatalf("the README names only %d relay metrics: %v", len(out), out)
	}
	return out
}

// scrapeRelayMetrics reads /metrics at url and returns each chronos_relay_
// family with its label names (sorted, comma separated; a histogram's le
// left out).
func scrapeRelayMetrics(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	families := map[string]string{} // name → type
	labels := map[string]map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	sample := regexp.MustCompile(`^([a-z_]+)(?:\{([^}]*)\})? `)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && strings.HasPrefix(f[2], "chronos_relay_") {
			families[f[2]], labels[f[2]] = f[3], map[string]bool{}
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := m[1]
		if _, ok := families[name]; !ok {
			name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		}
		if _, ok := families[name]; !ok {
			continue
		}
		for _, kv := range strings.Split(m[2], ",") {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "le" {
				labels[name][k] = true
			}
		}
	}
	out := map[string]string{}
	for name := range families {
		out[name] = strings.Join(slices.Sorted(maps.Keys(labels[name])), ",")
	}
	return out
}

// TestRelayMetricsMatchTheREADME starts `chronos nas` and `chronos relay`
// on one Redis store and scrapes both: each serves exactly the relay
// metrics the README's table names, with the same labels, so dashboards and
// alerts work whichever process runs the dispatchers.
func TestRelayMetricsMatchTheREADME(t *testing.T) {
	t.Parallel()
	checkRelayMetrics(t, redistest.Start(t, redistest.Options{}).URL(), "")
}

// TestRelayMetricsOnPostgres is TestRelayMetricsMatchTheREADME on a
// PostgreSQL store, which both processes migrate as they start
// (store_migrate): each is ready (its store and store_epoch checks pass)
// and serves the same relay metrics.
func TestRelayMetricsOnPostgres(t *testing.T) {
	t.Parallel()
	store, _ := pgStore(t)
	checkRelayMetrics(t, store, "store_migrate: true\n")
}

// checkRelayMetrics starts `chronos nas` and `chronos relay` on store, with
// extra lines in their config, waits until both are ready and checks their
// relay metrics against the README.
func checkRelayMetrics(t *testing.T, store, extra string) {
	t.Helper()
	bin := buildChronos(t)
	dir := t.TempDir()
	listen, internal, relayOps := freeAddr(t), freeAddr(t), freeAddr(t)
	writeFile(t, filepath.Join(dir, "agents.yaml"), "- agent_id: a\n  instance_id: i\n  token_sha256: "+nas.TokenSHA256("tok")+"\n")
	cfg := filepath.Join(dir, "nas.yaml")
	writeFile(t, cfg, fmt.Sprintf("listen: %s\nrelay_listen: %s\npublic_url: http://%s\nstore: %q\n%sagents_file: %s\nrelay:\n  secrets: [%s]\n  dispatchers: 1\n",
		listen, internal, listen, store, extra, filepath.Join(dir, "agents.yaml"), nasTestSecret))
	startProc(t, bin, nil, nil, "nas", "--config", cfg)
	startProc(t, bin, nil, nil, "relay", "--config", cfg, "--listen", relayOps)
	waitHTTP(t, "http://"+internal+"/readyz", 20*time.Second)
	waitHTTP(t, "http://"+relayOps+"/readyz", 20*time.Second)

	want := readmeRelayMetrics(t)
	for process, url := range map[string]string{"chronos nas": "http://" + internal + "/metrics", "chronos relay": "http://" + relayOps + "/metrics"} {
		got := scrapeRelayMetrics(t, url)
		for name, labels := range want {
			if l, ok := got[name]; !ok {
				t.Errorf("%s does not serve %s, which the README documents", process, name)
			} else if l != labels {
				t.Errorf("%s serves %s{%s}; the README says {%s}", process, name, l, labels)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				t.Errorf("%s serves %s, which the README does not document", process, name)
			}
		}
	}
}
