package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/cmd/chronos/internal/relaybench"
	"github.com/chronoscron/chronos/internal/redistest"
)

// TestBenchRelaySmall runs `chronos bench relay` end to end at a small size on
// every store: every fire arrives, every token verifies, nothing is left.
func TestBenchRelaySmall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		store func(t *testing.T) string
		extra []string
	}{
		{"memory burst", func(*testing.T) string { return "memory" }, []string{"--n", "300"}},
		{"redis burst", func(t *testing.T) string { return redistest.Start(t, redistest.Options{}).URL() }, []string{"--n", "300"}},
		{"redis rate", func(t *testing.T) string { return redistest.Start(t, redistest.Options{}).URL() + "?shards=2" },
			[]string{"--rate", "400/s", "--duration", "500ms"}},
		{"postgres burst", func(t *testing.T) string { s, _ := pgStore(t); return s + "&pool_max_conns=8" }, []string{"--n", "300"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			args := append([]string{"bench", "relay", "--store", tc.store(t), "--at", "+300ms",
				"--agents", "10", "--json"}, tc.extra...)
			if code := run(ctx, args, &stdout, &stderr); code != exitOK {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
			}
			var res relaybench.Result
			if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
				t.Fatalf("result %q: %v", stdout.String(), err)
			}
			if res.Delivered != res.Fires || res.Lost != 0 || res.Failed != 0 || res.Verified < int64(res.Fires) {
				t.Fatalf("result %+v: want every fire delivered and verified", res)
			}
			if res.LeftInStore != 0 {
				t.Errorf("%d one-shots left in the store after the run", res.LeftInStore)
			}
			if res.LagP50Ms < 0 || res.LagP99Ms < res.LagP50Ms || res.LagMaxMs < res.LagP99Ms {
				t.Errorf("lags out of order: %+v", res)
			}
			if want, _, _ := strings.Cut(tc.name, " "); res.Store != want {
				t.Errorf("store %q, want %q", res.Store, want)
			}
			if res.Store == "redis" && res.BytesPerArmed <= 0 {
				t.Errorf("no bytes per armed one-shot reported for a redis store")
			}
			if res.Store == "postgres" && (res.PostgresBytesPerArmed <= 0 || res.PostgresCPUFireUs <= 0) {
				t.Errorf("postgres store: %.0f bytes per armed one-shot, %.0fµs server CPU per fire; want both measured (the test server is local)",
					res.PostgresBytesPerArmed, res.PostgresCPUFireUs)
			}
		})
	}
}

// TestBenchRelayBothDeliveries runs a small burst mediated, then direct,
// on Redis: both deliver every fire, and the comparison names the ratio of
// their fires per CPU second.
func TestBenchRelayBothDeliveries(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"bench", "relay", "--store", redistest.Start(t, redistest.Options{}).URL(), "--at", "+300ms",
		"--agents", "10", "--n", "300", "--delivery", "both", "--json"}
	if code := run(ctx, args, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	var cmp relaybench.Comparison
	if err := json.Unmarshal(stdout.Bytes(), &cmp); err != nil {
		t.Fatalf("result %q: %v", stdout.String(), err)
	}
	for _, res := range []*relaybench.Result{cmp.NAS, cmp.Direct} {
		if res == nil || res.Delivered != 300 || res.Lost != 0 || res.Failed != 0 || res.LeftInStore != 0 || res.FiresPerCPUSecond <= 0 {
			t.Fatalf("result %+v: want every fire delivered and verified", res)
		}
	}
	if cmp.NAS.Delivery != "nas" || cmp.Direct.Delivery != "direct" || cmp.Direct.SigningAlg != "HS256" || cmp.DirectPerCPU <= 0 {
		t.Fatalf("comparison %+v", cmp)
	}
}

func TestBenchRelayUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "relay", "--at", "soon"},
		{"bench", "relay", "--rate", "fast"},
		{"bench", "relay", "--rate", "10/h"},
		{"bench", "relay", "--n", "5", "--rate", "10/s"},
		{"bench", "relay", "--n", "0"},
		{"bench", "relay", "--rate", "10/s", "--duration", "0s"},
		{"bench", "relay", "--delivery", "pigeon"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr.String())
		}
	}
}

// TestBenchRelayMemProfile: --memprofile writes an allocation profile of
// the run; a path that cannot be created fails before anything runs.
func TestBenchRelayMemProfile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	bad := []string{"bench", "relay", "--n", "50", "--at", "+0s", "--memprofile", filepath.Join(dir, "missing", "allocs.prof")}
	if code := run(ctx, bad, &stdout, &stderr); code == exitOK || !strings.Contains(stderr.String(), "memprofile") || stdout.Len() != 0 {
		t.Fatalf("bad path: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	path := filepath.Join(dir, "allocs.prof")
	stdout.Reset()
	stderr.Reset()
	good := []string{"bench", "relay", "--n", "50", "--at", "+0s", "--agents", "5", "--memprofile", path}
	if code := run(ctx, good, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %v %v: want a non-empty file", fi, err)
	}
}
