package demo

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	nashttp "github.com/chronoscron/chronos/nas/http"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// nasConfig is what the in-process NAS needs.
type nasConfig struct {
	public   net.Listener // the agent API and the key set
	relay    net.Listener // the relay route the dispatcher calls
	agent    identity     // the one agent NAS knows
	narrator *narrator
}

// nasSide is NAS running in the demo's process: the service on the embedded
// engine, its HTTP servers and one dispatcher.
type nasSide struct {
	publicURL, relayURL string

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	releasers []func() // run in reverse order by close
	closeOnce sync.Once
}

// startNAS starts NAS on the embedded engine, with a dispatcher that calls
// its relay route, serving on c's listeners until ctx ends or close.
func startNAS(ctx context.Context, c nasConfig) (*nasSide, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &nasSide{
		publicURL: "http://" + c.public.Addr().String(),
		relayURL:  "http://" + c.relay.Addr().String(),
		cancel:    cancel,
	}
	nasLog, relayLog := c.narrator.logger("nas"), c.narrator.logger("relay")
	engine := memory.New(memory.Options{})
	s.onClose(func() { _ = engine.Close() })
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	svc, err := newNASService(c, s.publicURL, engine, secret)
	if err != nil {
		s.close()
		return nil, err
	}
	s.onClose(svc.Close)
	srv := nashttp.NewServer(svc, nashttp.Options{Split: true, Logger: nasLog})

	// The relay: a dispatcher calling NAS's relay route, each call narrated.
	hd, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: s.relayURL, Keys: [][]byte{secret}, Logger: relayLog, Timeout: 20 * time.Second})
	if err != nil {
		s.close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	s.onClose(hd.Close)
	disp := relay.NewDispatcher(engine, narratedDeliverer(hd, c.narrator), relay.DispatcherConfig{Logger: relayLog, Metrics: svc.Metrics().Relay()})

	s.wg.Go(func() { _ = srv.Serve(ctx, c.public) })
	s.wg.Go(func() { _ = srv.ServeInternal(ctx, c.relay) })
	s.wg.Go(func() { _ = disp.Run(ctx) })
	return s, nil
}

// newNASService makes the NAS service: keys made in memory, the one agent,
// the webhook secret the dispatcher signs with.
func newNASService(c nasConfig, publicURL string, engine relay.Engine, secret []byte) (*nas.Service, error) {
	keys, err := nas.NewEphemeralKeyRing(nas.DefaultSigningAlg)
	if err != nil {
		return nil, fmt.Errorf("demo: keys: %w", err)
	}
	agents, err := nas.NewStaticAgents([]nas.AgentEntry{{
		AgentID: c.agent.agentID, InstanceID: c.agent.instanceID, TokenSHA256: nas.TokenSHA256(c.agent.token),
	}})
	if err != nil {
		return nil, fmt.Errorf("demo: agents: %w", err)
	}
	svc, err := nas.New(nas.Options{
		Config: nas.Config{
			Listen: c.public.Addr().String(), RelayListen: c.relay.Addr().String(), PublicURL: publicURL,
			Relay:                 nas.RelayConfig{Secrets: []string{contract.FormatWebhookSecret(secret)}},
			AllowPrivateCallbacks: true, DeliveryTimeout: 10 * time.Second,
		},
		Engine: engine, Verifier: agents, Keys: keys, Logger: c.narrator.logger("nas"),
	})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return svc, nil
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

// onClose adds a release to run at close.
func (s *nasSide) onClose(f func()) { s.releasers = append(s.releasers, f) }

// stop stops the servers and the dispatcher and waits for them.
func (s *nasSide) stop() {
	s.cancel()
	s.wg.Wait()
}

// close stops NAS and releases the service and the engine. It may be called
// more than once.
func (s *nasSide) close() {
	s.closeOnce.Do(func() {
		s.stop()
		for i := len(s.releasers) - 1; i >= 0; i-- {
			s.releasers[i]()
		}
	})
}
