package node_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	relayredis "github.com/chronoscron/chronos/relay/redis"
)

// TestRelayProcessRecordsHistory runs a relay process (node.RunRelay) on
// Redis with NAS unreachable: its dispatcher's attempts show in the store's
// history as retries, the fire in the agent's recent deliveries, and the
// process among the dispatching ones as kind relay with its last claim.
func TestRelayProcessRecordsHistory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := redistest.Start(t, redistest.Options{})
	var p [6]byte
	_, _ = rand.Read(p[:])
	prefix := "hist-" + hex.EncodeToString(p[:])
	engine, err := relayredis.Open(ctx, srv.URL(), relayredis.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = engine.Close() })
	if _, err := engine.Arm(ctx, relay.ArmRequest{AgentID: "agent-a", InstanceID: "inst-a", JobID: "j", FireAt: time.Now(),
		CallbackURL: "http://127.0.0.1:1/fire", ScheduleID: "sch-j"}); err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	one := 1
	cfg := nas.Config{
		PublicURL: "https://nas.example", Store: srv.URL() + "?prefix=" + prefix, AllowPrivateCallbacks: true,
		Relay: nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}, NASURL: "http://127.0.0.1:1", Dispatchers: &one},
	}.WithDefaults()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- node.RunRelay(runCtx, node.RelayOptions{Config: cfg, Logger: slog.New(slog.DiscardHandler)})
	}()
	var procs []relay.ProcessBeat
	for {
		procs, err = engine.Processes(ctx, time.Now().Add(-time.Minute))
		if err == nil && len(procs) == 1 && !procs[0].LastClaim.IsZero() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no beat of the relay process with a claim: %+v %v", procs, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if procs[0].Kind != "relay" || procs[0].Dispatchers != 1 {
		t.Fatalf("beat %+v, want kind relay with 1 dispatcher", procs[0])
	}
	minutes, err := engine.HistoryMinutes(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var retries int64
	for _, m := range minutes {
		retries += m.Outcomes[relay.HistoryRetry]
	}
	if retries == 0 {
		t.Fatalf("history %+v, want the attempts NAS did not answer as retries", minutes)
	}
	recent, err := engine.RecentDeliveries(ctx, "agent-a", 0)
	if err != nil || len(recent) == 0 || recent[0].JobID != "j" || recent[0].Outcome != relay.HistoryRetry {
		t.Fatalf("recent deliveries %+v %v", recent, err)
	}
}
