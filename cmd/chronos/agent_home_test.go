package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestAgentServeHomeFlag: `chronos agent serve --home DIR` with no provider
// configured runs the jobs of DIR on the built-in timer, and `agent status
// --home DIR` reads the same home.
func TestAgentServeHomeFlag(t *testing.T) {
	t.Setenv("CHRONOS_HOME", t.TempDir()) // a different home: the flag must win
	t.Setenv(envAgentConfig, "")
	home := t.TempDir()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"jobs", "add", "--home", home, "--id", "tick", "--schedule", "every 1s", "--", "true"}, &out, &errOut); code != 0 {
		t.Fatalf("jobs add: exit %d: %s", code, errOut.String())
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var serveErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent", "serve", "--home", home, "--listen", "127.0.0.1:0"}, &bytes.Buffer{}, &serveErr)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var runs, stderr bytes.Buffer
		if code := run(t.Context(), []string{"runs", "list", "--home", home, "--job", "tick"}, &runs, &stderr); code == 0 && strings.Contains(runs.String(), "succeeded") {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("no succeeded run of tick in %s; agent said:\n%s", home, serveErr.String())
		}
		select {
		case code := <-done:
			t.Fatalf("agent serve exited %d early: %s", code, serveErr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("agent serve exit %d after shutdown: %s", code, serveErr.String())
	}
	if !strings.Contains(serveErr.String(), `"home":"`+home+`"`) {
		t.Errorf("agent did not run on --home %s: %s", home, serveErr.String())
	}
	var status, stderr bytes.Buffer
	if code := run(t.Context(), []string{"agent", "status", "--home", home}, &status, &stderr); code != 0 || !strings.Contains(status.String(), "tick") {
		t.Fatalf("agent status --home: exit %d\n%s%s", code, status.String(), stderr.String())
	}
}
