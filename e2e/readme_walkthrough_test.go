package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
)

// TestReadmeWalkthrough runs every command the README shows, in order, in a
// temporary directory: the ports and the Redis address are replaced by free
// ones, the commands that start NAS, the relays and the agent are started as
// processes and awaited through their readiness endpoints, and every other
// block runs as a bash script that must succeed. At the end the README's
// every-2s job must have run.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t)
	dir := t.TempDir()
	nasPort, relayPort, agentPort, uiPort := freePort(t), freePort(t), freePort(t), freePort(t)
	subst := strings.NewReplacer(
		"127.0.0.1:8788", fmt.Sprintf("127.0.0.1:%d", uiPort),
		"127.0.0.1:8080", fmt.Sprintf("127.0.0.1:%d", nasPort),
		"127.0.0.1:8081", fmt.Sprintf("127.0.0.1:%d", relayPort),
		"127.0.0.1:8090", fmt.Sprintf("127.0.0.1:%d", agentPort),
		"127.0.0.1:8082", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"127.0.0.1:8083", fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"redis://127.0.0.1:6379/0", redistest.URL(t)+"/0?prefix="+redistest.Prefix(t),
	)
	ready := map[string]string{
		"nas":         fmt.Sprintf("http://127.0.0.1:%d/readyz", nasPort),
		"agent serve": fmt.Sprintf("http://127.0.0.1:%d/readyz", agentPort),
	}
	listenFlag := regexp.MustCompile(`--listen (\S+)`)
	var ran []string
	daemons := 0
	for _, b := range blocks {
		switch b.lang {
		case "yaml":
			name, _, _ := strings.Cut(strings.TrimPrefix(b.text, "# "), "\n")
			writeFile(t, dir, name, subst.Replace(b.text))
			continue
		case "sh":
		default:
			continue
		}
		lines := commandLines(b)
		if lines[0] == "make demo" {
			// The quick start: make test is what .ci/run runs, make demo is
			// run by TestReadmeMakeDemo.
			if strings.Join(lines, ";") != "make demo;make test" {
				t.Fatalf("README quick start changed: %q", lines)
			}
			continue
		}
		if strings.HasPrefix(lines[0], "go install ") || lines[0] == "make build" {
			// The install section, checked by TestReadmeInstall: the go
			// install of the module as published and an install into
			// /usr/local/bin are not for a test's temporary directory.
			continue
		}
		if daemonLine.MatchString(lines[0]) {
			for _, l := range lines {
				m := daemonLine.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("README line %d: a block that starts a process holds only such commands, not %q", b.line, l)
				}
				daemons++
				l = subst.Replace(l)
				args := strings.Fields(strings.TrimPrefix(l, "chronos "))
				var env []string
				if m[1] == "agent serve" {
					// The agent's local API on its default address, moved
					// like the other ports.
					env = []string{fmt.Sprintf("CHRONOS_UI_LISTEN=127.0.0.1:%d", uiPort)}
				}
				p := startProc(t, fmt.Sprintf("readme-%d", daemons), dir, env, args...)
				u, ok := ready[m[1]]
				if lm := listenFlag.FindStringSubmatch(l); lm != nil {
					u, ok = "http://"+lm[1]+"/readyz", true
				}
				if !ok {
					t.Fatalf("README line %d: no readiness endpoint known for %q", b.line, l)
				}
				waitReady(t, p, u, 30*time.Second)
				ran = append(ran, l)
			}
			continue
		}
		runScript(t, dir, subst.Replace(b.text))
		ran = append(ran, lines...)
	}
	if daemons < 4 {
		t.Fatalf("the README started %d processes; want NAS, two relays and an agent", daemons)
	}
	// The every-2s job of the README runs through the whole system.
	eventually(t, 30*time.Second, "the README's hello job to succeed twice", func() (bool, string) {
		n := 0
		for _, r := range foldRuns(readLedger(t, filepath.Join(dir, "agent-home"))) {
			if r.state == "succeeded" && r.trigger == "scheduled" {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d scheduled runs succeeded", n)
	})
	// The edited heartbeat kept its id and took the edit; paused, each slot
	// that passes is recorded skipped with reason paused, one line a slot.
	var job struct{ Name, Schedule, State string }
	if err := json.Unmarshal([]byte(runScript(t, dir, "chronos jobs show --home agent-home heartbeat --json")), &job); err != nil {
		t.Fatal(err)
	}
	if job.Name != "Heartbeat" || job.Schedule != "every 2s" || job.State != "paused" {
		t.Fatalf("heartbeat after edit and pause: %+v", job)
	}
	eventually(t, 30*time.Second, "the paused heartbeat's slots to be recorded skipped", func() (bool, string) {
		var runs []struct {
			RunID         string `json:"run_id"`
			State, Reason string
		}
		out := runScript(t, dir, "chronos runs list --home agent-home --job heartbeat --json")
		if err := json.Unmarshal([]byte(out), &runs); err != nil {
			t.Fatal(err)
		}
		n, seen := 0, map[string]bool{}
		for _, r := range runs {
			if r.State == "skipped" && strings.HasPrefix(r.Reason, "paused") && !seen[r.RunID] {
				seen[r.RunID] = true
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d slots recorded skipped while paused", n)
	})
	t.Logf("ran %d README commands", len(ran))
}
