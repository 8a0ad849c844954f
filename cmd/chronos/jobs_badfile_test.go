package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/store"
)

// fence returns job id's fencing token as another process reads jobs.json
// (it grows with every claim), and false while the file cannot be read.
func fence(home, id string) (uint64, bool) {
	st, err := store.Open(home, store.Options{})
	if err != nil {
		return 0, false
	}
	defer st.Close()
	j, err := st.Get(context.Background(), id)
	return j.Fence, err == nil
}

// getReadyz returns the status and body of GET url.
func getReadyz(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServingAgentOutlivesABadJobsFile: a serving agent whose jobs.json is
// overwritten with garbage answers /readyz 503 naming jobs.json, keeps
// claiming and running its job from the last good jobs, and its next claim
// writes them back (the garbage kept aside, a warning logged), after which
// it is ready again. A command, with no good read behind it, refuses the
// garbage, and an oversize file, with the reason and the limit's setting.
func TestServingAgentOutlivesABadJobsFile(t *testing.T) {
	t.Parallel()
	bin := buildChronos(t)
	home := filepath.Join(t.TempDir(), "home")
	env := []string{envAgentConfig + "=", "CHRONOS_UI_LISTEN=off"}
	proccli(t, bin, env, 0, "jobs", "add", "--home", home, "--id", "tick", "--schedule", "every 1s", "--", "true")
	addr := freeAddr(t)
	agent := startProc(t, bin, env, nil, "agent", "serve", "--home", home, "--listen", addr)
	readyURL := "http://" + addr + "/readyz"
	waitHTTP(t, readyURL, 20*time.Second)

	path := filepath.Join(home, store.JobsFile)
	garbage := "garbage written over jobs.json"
	sawNotReady := false
	for round := 0; round < 10 && !sawNotReady; round++ {
		var before uint64
		poll(t, 20*time.Second, "a claim of tick", func() bool {
			f, ok := fence(home, "tick")
			before = f
			return ok && f > 0
		})
		writeFile(t, path, garbage+" "+strconv.Itoa(round))
		// The job fires every second: the agent may have claimed (and so
		// written the jobs back) before this answer; then try again.
		code, body := getReadyz(t, readyURL)
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "jobs.json does not parse") || strings.Contains(body, home) {
				t.Fatalf("readyz %d %s, want the reason without the home", code, body)
			}
			sawNotReady = true
		}
		poll(t, 20*time.Second, "a claim from the last good jobs", func() bool {
			f, ok := fence(home, "tick")
			return ok && f > before
		})
	}
	if !sawNotReady {
		t.Fatal("readyz never answered 503 while jobs.json was garbage")
	}
	poll(t, 20*time.Second, "readyz 200 once the jobs were written back", func() bool {
		code, _ := getReadyz(t, readyURL)
		return code == http.StatusOK
	})
	copies, _ := filepath.Glob(path + ".corrupt-*")
	if len(copies) == 0 {
		t.Fatal("the garbage was not kept aside")
	}
	// The test writes the garbage in place, so the agent may also have
	// met the file empty, half written, and kept that aside too.
	kept := false
	for _, c := range copies {
		if b, _ := os.ReadFile(c); strings.HasPrefix(string(b), garbage) {
			kept = true
		}
	}
	if !kept {
		t.Fatalf("no copy of %d holds the garbage", len(copies))
	}
	log := agent.out.String()
	if !strings.Contains(log, "jobs.json on disk is bad") || !strings.Contains(log, "the bad jobs.json was replaced") {
		t.Fatalf("no warnings of the bad file in the agent's log:\n%s", log)
	}

	// A command has no last good jobs: it refuses the file, with why.
	stop := agent.cmd.Process.Signal
	if err := stop(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	_ = agent.wait(t, 30*time.Second)
	writeFile(t, path, garbage)
	out, _ := proccli(t, bin, env, 1, "jobs", "list", "--home", home)
	if !strings.Contains(out, "jobs file is corrupt") {
		t.Fatalf("jobs list of a garbage jobs.json:\n%s", out)
	}
	writeFile(t, path, `{"version":2,"generation":1,"jobs":[]}`+strings.Repeat(" ", 4096))
	out, _ = proccli(t, bin, append(env, "CHRONOS_MAX_JOBS_FILE_BYTES=1024"), 1, "jobs", "list", "--home", home)
	if !strings.Contains(out, "over the limit of 1024 bytes set by max_jobs_file_bytes (CHRONOS_MAX_JOBS_FILE_BYTES)") {
		t.Fatalf("jobs list of an oversize jobs.json:\n%s", out)
	}
}
