package nas_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"testing"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay/memory"
)

// TestStopAndStartInstance checks StopInstance and StartInstance at the
// service: each answers the state it set and the store holds it; an id that
// cannot be one is a 400 that changes nothing.
func TestStopAndStartInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("t")}})
	if err != nil {
		t.Fatal(err)
	}
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	cfg := nas.Config{PublicURL: "https://nas.example.com", Relay: nas.RelayConfig{Secrets: []string{secret}}}
	svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: agents, Keys: ring, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)

	stopped := func(want bool) {
		t.Helper()
		got, err := eng.InstanceStopped(ctx, "i")
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("store says stopped=%v, want %v", got, want)
		}
	}
	for _, step := range []struct {
		name string
		call func(context.Context, string) (contract.InstanceStateResponse, error)
		want bool
	}{
		{"stop", svc.Operator().StopInstance, true},
		{"stop again", svc.Operator().StopInstance, true},
		{"start", svc.Operator().StartInstance, false},
		{"stop once more", svc.Operator().StopInstance, true},
	} {
		resp, err := step.call(ctx, "i")
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if resp != (contract.InstanceStateResponse{InstanceID: "i", Stopped: step.want}) {
			t.Fatalf("%s: answered %+v", step.name, resp)
		}
		stopped(step.want)
	}
	for _, call := range []func(context.Context, string) (contract.InstanceStateResponse, error){svc.Operator().StopInstance, svc.Operator().StartInstance} {
		_, err := call(ctx, "i/x")
		var ce *contract.Error
		if !errors.As(err, &ce) || ce.HTTPStatus() != http.StatusBadRequest || ce.Code != contract.CodeInvalidRequest {
			t.Fatalf("an id with a slash: got %v, want 400 invalid_request", err)
		}
	}
	stopped(true)
}
