package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/node"
	"github.com/chronoscron/chronos/relay"
)

// nasConfig is what the in-process NAS needs.
type nasConfig struct {
	public   net.Listener // the agent API and the key set
	relay    net.Listener // the relay route the dispatcher calls
	agent    identity     // the one agent NAS knows
	narrator *narrator
}

// nasSide is NAS running in the demo's process: a node on the embedded
// engine with its signing key made in memory, serving the agent API and the
// relay route, and one dispatcher calling that route, each delivery
// narrated.
type nasSide struct {
	publicURL, relayURL string

	cancel context.CancelFunc
	done   chan struct{} // closed when the node has stopped
	err    error         // why it stopped, once done is closed
}

// startNAS starts NAS serving on c's listeners until ctx ends or stop.
func startNAS(ctx context.Context, c nasConfig) (*nasSide, error) {
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{
		AgentID: c.agent.agentID, InstanceID: c.agent.instanceID, TokenSHA256: nas.TokenSHA256(c.agent.token),
	}})
	if err != nil {
		return nil, fmt.Errorf("demo: agents: %w", err)
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	publicURL := "http://" + c.public.Addr().String()
	nd, err := node.New(ctx, node.Options{
		Config: nas.Config{
			Listen: c.public.Addr().String(), RelayListen: c.relay.Addr().String(), PublicURL: publicURL, Store: "memory",
			Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}},
			AllowPrivateCallbacks: true, DeliveryTimeout: 10 * time.Second,
		},
		Logger: c.narrator.logger("nas"), Listener: c.public, RelayListener: c.relay, Verifier: agents,
		Dispatch: node.DispatchOptions{
			Logger: c.narrator.logger("relay"),
			Wrap:   func(d relay.Deliverer) relay.Deliverer { return narratedDeliverer(d, c.narrator) },
		},
	})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &nasSide{publicURL: publicURL, relayURL: nd.RelayURL(), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = nd.Run(ctx)
	}()
	return s, nil
}

// narratedDeliverer is d with each delivery narrated as the relayed step,
// and an outcome other than done as a step of its own.
func narratedDeliverer(d relay.Deliverer, n *narrator) relay.Deliverer {
	return relay.DelivererFunc(func(ctx context.Context, l relay.Lease) relay.Outcome {
		n.step(l.JobID, stepRelayed, fmt.Sprintf("attempt %d: dispatcher → NAS relay route, %s after fire_at", l.Attempt, roundDur(time.Since(l.FireAt))))
		out := d.Deliver(ctx, l)
		if out.Kind != relay.Done {
			n.step(l.JobID, strings.ToLower(out.Kind.String()), out.Reason)
		}
		return out
	})
}

// stop stops NAS's servers and dispatcher, waits for them and releases the
// node. It may be called more than once; it returns why NAS stopped if that
// was a failure.
func (s *nasSide) stop() error {
	s.cancel()
	<-s.done
	if s.err != nil {
		return fmt.Errorf("demo: nas: %w", s.err)
	}
	return nil
}

// close stops NAS, as stop does, for the returns that have no use for why.
func (s *nasSide) close() { _ = s.stop() }
