package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/chronoscron/chronos/agent/chain"
)

// TestChainCommandsExitCodes runs the chain commands in process on a home
// no agent serves: each refusal has its exit code and prints only its
// error; bad input is a usage error and changes nothing.
func TestChainCommandsExitCodes(t *testing.T) {
	_, cmd := homeCLI(t)
	start := []string{"chain", "start", "--class", "disk", "--id", "inc", "--stage", "action", "--in", "10m", "--max-retries", "0", "--", "true"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"start", start, 0, ""},
		{"duplicate start", start, 3, "already running"},
		{"recurring step", []string{"chain", "start", "--class", "disk", "--stage", "a", "--at", "every 1m", "--", "true"}, 2, "runs once"},
		{"no time", []string{"chain", "start", "--class", "disk", "--stage", "a", "--", "true"}, 2, "one of them"},
		{"no command", []string{"chain", "start", "--class", "disk", "--stage", "a", "--in", "1m"}, 2, "after \"--\""},
		{"bad class", []string{"chain", "start", "--class", "a.b", "--stage", "a", "--in", "1m", "--", "true"}, 2, "class"},
		{"unknown chain", []string{"chain", "spawn", "--chain", "nope", "--stage", "v", "--in", "1m", "--", "true"}, 2, "chain not found"},
		{"retry past max_retries", []string{"chain", "spawn", "--chain", "inc", "--retry", "--stage", "verify", "--in", "1m", "--", "true"}, 2, "no step of stage verify"},
		{"spawn", []string{"chain", "spawn", "--chain", "inc", "--stage", "verify", "--in", "1m", "--", "true"}, 0, ""},
		{"duplicate spawn", []string{"chain", "spawn", "--chain", "inc", "--stage", "verify", "--in", "1m", "--", "true"}, 3, "duplicate"},
		{"limit", []string{"chain", "spawn", "--chain", "inc", "--retry", "--stage", "verify", "--in", "1m", "--", "true"}, 4, "max_retries"},
		{"closed", []string{"chain", "close", "--chain", "inc", "--reason", "done by hand"}, 6, "chain closed"},
		{"breaker", []string{"chain", "start", "--class", "disk", "--id", "inc2", "--stage", "action", "--in", "10m", "--", "true"}, 5, "breaker open"},
		{"bad state", []string{"chains", "list", "--state", "sleeping"}, 2, "must be one of"},
		{"reset", []string{"chain", "breaker", "reset", "disk"}, 0, ""},
		{"reset unknown", []string{"chain", "breaker", "reset", "web"}, 2, "no breaker"},
	} {
		code, out, errs := cmd(tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.err) {
			t.Fatalf("%s: exit %d (want %d), stderr %q (want %q)", tc.name, code, tc.code, errs, tc.err)
		}
		if code != 0 && out != "" {
			t.Errorf("%s: a refusal printed %q", tc.name, out)
		}
	}
	code, out, _ := cmd("chains", "show", "inc", "--json")
	var c chain.Chain
	if code != 0 || json.Unmarshal([]byte(out), &c) != nil || c.ClosedReason != "limit: max_retries" || len(c.Steps) != 2 {
		t.Fatalf("chains show: exit %d: %s", code, out)
	}
	if code, out, _ := cmd("chains", "list", "--state", "closed"); code != 0 || !strings.Contains(out, "failure: limit: max_retries") {
		t.Fatalf("chains list: exit %d: %s", code, out)
	}
}

// homeCLI returns a fresh home no agent serves and a function that runs a
// command in process on it, returning its exit code, stdout and stderr.
func homeCLI(t *testing.T) (string, func(args ...string) (int, string, string)) {
	t.Helper()
	home := t.TempDir()
	t.Setenv("CHRONOS_HOME", home)
	t.Setenv("CHRONOS_AGENT_CONFIG", "")
	return home, func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{args[0], "--home", home}, args[1:]...), &out, &errb)
		return code, out.String(), errb.String()
	}
}
