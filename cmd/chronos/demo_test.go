package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDemoRunsForItsDurationInTheGivenHome(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	code := run(ctx, []string{"demo", "--for", "2s", "--home", home}, &stdout, &stderr)
	took := time.Since(began)
	out := stdout.String()
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, stderr.String())
	}
	if took < 2*time.Second || took > 20*time.Second {
		t.Errorf("demo --for 2s took %s", took)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
	for _, want := range []string{"Chronos demo: NAS, its relay and an agent in one process", "home " + home + " (kept)", "Summary after ", "runs list --home " + home} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "jobs.json")); err != nil {
		t.Errorf("--home not used: %v", err)
	}
}

func TestDemoRefusesANegativeDuration(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--for", "-1s"}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr %s", code, exitUsage, stderr.String())
	}
}
