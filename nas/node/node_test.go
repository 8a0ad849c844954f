package node_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// TestNodeInProcess builds NAS the way an embedding program does (a memory
// engine, given listeners, a static verifier, a wrapped deliverer), arms a
// fire through the agent API, sees it delivered in process by the node's
// dispatchers (through the wrapped deliverer), and stops when the context
// ends.
func TestNodeInProcess(t *testing.T) {
	t.Parallel()
	fired := make(chan string, 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fired <- string(body)
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(agent.Close)
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{AgentID: "a", InstanceID: "i", TokenSHA256: nas.TokenSHA256("tok")}})
	if err != nil {
		t.Fatal(err)
	}
	engine := memory.New(memory.Options{})
	t.Cleanup(func() { _ = engine.Close() })
	public, internal := listen(t), listen(t)
	one := 1
	var wrapped atomic.Int64
	n, err := node.New(context.Background(), node.Options{
		Config: nas.Config{
			Listen: public.Addr().String(), PublicURL: "http://" + public.Addr().String(), Store: "memory",
			Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))}, Dispatchers: &one},
			AllowPrivateCallbacks: true,
		},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Engine: engine, Listener: public, RelayListener: internal, Verifier: agents,
		Dispatch: node.DispatchOptions{Wrap: func(d relay.Deliverer) relay.Deliverer {
			return relay.DelivererFunc(func(ctx context.Context, l relay.Lease) relay.Outcome {
				wrapped.Add(1)
				return d.Deliver(ctx, l)
			})
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.RelayURL() != "http://"+internal.Addr().String() || n.URL() != "http://"+public.Addr().String() {
		t.Fatalf("urls %s %s", n.URL(), n.RelayURL())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()

	at := contract.FormatTime(time.Now().Add(100 * time.Millisecond))
	body := fmt.Sprintf(`{"job_id":"j","fire_at":%q,"agent_callback_url":%q,"dedup_key":"j:%s"}`, at, agent.URL, at)
	req, _ := http.NewRequest(http.MethodPost, n.URL()+contract.PathProvision, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("provision: %v %v", resp, err)
	}
	resp.Body.Close()
	select {
	case b := <-fired:
		if !strings.Contains(b, `"job_id":"j"`) {
			t.Fatalf("fire body %s", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fire never arrived")
	}
	if wrapped.Load() < 1 {
		t.Error("the wrapped deliverer saw no delivery")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the node did not stop")
	}
	if _, err := engine.Stats(context.Background()); err != nil {
		t.Errorf("the node closed an engine it was given: %v", err)
	}
}

// TestNewRefusesBadSettingsAndReleasesListeners: a node that cannot be
// built closes the listener it was given.
func TestNewRefusesBadSettingsAndReleasesListeners(t *testing.T) {
	t.Parallel()
	ln := listen(t)
	_, err := node.New(context.Background(), node.Options{
		Config: nas.Config{Listen: ln.Addr().String(), PublicURL: "http://x", Store: "memory", SigningAlg: "HS256"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Listener: ln,
	})
	if err == nil {
		t.Fatal("a node with signing_alg HS256 was built")
	}
	if _, err := ln.Accept(); err == nil {
		t.Error("the listener was left open")
	}
}
