package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth/fireauthtest"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/contract"
)

// fakeNAS serves what a woken agent asks NAS for: the key set, the list and
// provisions. Fires come from the benchmark itself.
func fakeNAS(tb testing.TB, jwks []byte) *httptest.Server {
	tb.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+contract.PathJWKS, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(jwks) })
	mux.HandleFunc("GET "+contract.PathList, func(w http.ResponseWriter, _ *http.Request) {
		contract.WriteJSON(w, http.StatusOK, contract.ListResponse{Armed: []contract.ArmedJob{}, FailedFires: []contract.FailedFire{}})
	})
	mux.HandleFunc("POST "+contract.PathProvision, func(w http.ResponseWriter, r *http.Request) {
		var req contract.ProvisionRequest
		if e := contract.DecodeRequest(w, r, 0, &req); e != nil {
			contract.WriteError(w, e)
			return
		}
		contract.WriteJSON(w, http.StatusOK, contract.ProvisionResponse{ScheduleID: "sch_" + req.JobID, FireAt: req.FireAt, Armed: true})
	})
	mux.HandleFunc("POST "+contract.PathCancel, func(w http.ResponseWriter, _ *http.Request) {
		contract.WriteJSON(w, http.StatusOK, contract.OKResponse{OK: true})
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

// BenchmarkAgentWake measures what scale to zero costs a fire: from the
// start of an agent process handed a listening socket (as systemd does on
// the first connection) to the 202 of the fire waiting on that socket. It
// includes process start, opening the home, loading NAS's key set, verifying
// the token and claiming the slot.
//
//	go test ./cmd/chronos -run '^$' -bench BenchmarkAgentWake -benchtime 20x
func BenchmarkAgentWake(b *testing.B) {
	bin := buildChronos(b)
	dir := b.TempDir()
	home := filepath.Join(dir, "home")
	key, err := fireauthtest.NewKey("EdDSA", "bench")
	if err != nil {
		b.Fatal(err)
	}
	jwks, err := fireauthtest.JWKS(key)
	if err != nil {
		b.Fatal(err)
	}
	nasSrv := fakeNAS(b, jwks)
	const audience = "agent:bench"

	// One job per iteration, added just before it (while no agent runs):
	// created, by the clock of the runtime that adds it, an hour less 20 s
	// ago with an hourly schedule, so its first slot is 20 s ahead. That is
	// within the clock-skew allowance (a fire further ahead would be refused
	// as too early) and not yet due, so no agent catches it up before its
	// fire arrives.
	ctx := context.Background()
	addJob := func(i int) time.Time {
		rt, err := agent.Open(ctx, agent.Config{Home: home, Logger: slog.New(slog.DiscardHandler),
			Now: func() time.Time { return time.Now().Add(-time.Hour + 20*time.Second) }})
		if err != nil {
			b.Fatal(err)
		}
		j, _, err := rt.AddJob(ctx, agent.JobSpec{ID: fmt.Sprintf("bench-%d", i), Schedule: "every 1h",
			Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "true"}}})
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.Close(ctx); err != nil {
			b.Fatal(err)
		}
		return *j.NextRunAt
	}
	writeFile(b, filepath.Join(dir, "token"), "bench-token\n")

	client := &http.Client{Timeout: 30 * time.Second}
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		slot := addJob(i)
		ln, f := listenerFile(b)
		url := "http://" + ln.Addr().String()
		cfg := filepath.Join(dir, fmt.Sprintf("agent-%d.yaml", i))
		writeFile(b, cfg, agentYAML(home, nasSrv.URL, url, audience))
		fire := fireauthtest.NewFire(nasSrv.URL, audience, time.Now(), contract.FireRequest{
			JobID: fmt.Sprintf("bench-%d", i), FireAt: contract.NewTime(slot), ScheduleID: "sch_1", Attempt: 1})
		token, err := fireauthtest.Mint(key, fire)
		if err != nil {
			b.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, url+contract.PathFire, bytes.NewReader(fire.Body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		b.StartTimer()

		start := time.Now()
		p := startProc(b, bin, activationEnv(), []*os.File{f}, "agent", "serve", "--config", cfg, "--log-level", "warn")
		resp, err := client.Do(req)
		elapsed := time.Since(start)

		b.StopTimer()
		if err != nil {
			b.Fatalf("fire: %v\n%s", err, p.out.String())
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var fr contract.FireResponse
		if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &fr) != nil || fr.Status != contract.FireAccepted {
			b.Fatalf("fire answered %d %s\n%s", resp.StatusCode, body, p.out.String())
		}
		total += elapsed
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if err := p.wait(b, 30*time.Second); err != nil {
			b.Fatalf("agent exit: %v\n%s", err, p.out.String())
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/wake-to-202")
}
