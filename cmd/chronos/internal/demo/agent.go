package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/chronoscron/chronos/agent"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
)

// agentConfig is what the in-process agent needs.
type agentConfig struct {
	home     string
	listener net.Listener // the fire endpoint
	nasURL   string       // NAS's agent API and key set
	agent    identity
	narrator *narrator
}

// agentDrainTimeout is how long the demo's runs in progress may finish when
// it ends.
const agentDrainTimeout = 5 * time.Second

// agentSide is the agent running in the demo's process: the agent as the
// binary runs it (sidecar: runtime, verifier, NAS client, reconciler, fire
// endpoint) with each verified token narrated, and the demo's own runtime
// on the same home, which adds the sample jobs (the agent sees them as it
// sees a job command's) and reads the ledger.
type agentSide struct {
	url      string
	rt       *agent.Runtime
	ready    *readySignal
	verifier observedVerifier // set before ready fires

	cancel    context.CancelFunc
	done      chan struct{} // closed when the agent has stopped
	err       error         // why it stopped, once done is closed
	closeOnce sync.Once
}

// startAgent opens the demo's runtime on c.home and starts the agent there,
// serving its fire endpoint on c.listener until stop. The agent does not
// stop with ctx: NAS stops first, so that no fire is in flight against a
// stopped agent.
func startAgent(ctx context.Context, c agentConfig) (*agentSide, error) {
	a := &agentSide{url: "http://" + c.listener.Addr().String(), ready: newReadySignal(), done: make(chan struct{})}
	rt, err := agent.Open(ctx, agent.Config{Home: c.home, Logger: c.narrator.logger("agent")})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	a.rt = rt
	c.narrator.setRanDetail(func(jobID, runID string) string { return runDetail(rt, c.home, jobID, runID) })
	c.narrator.setNoticeDetail(func(id string) string { return noticeDetail(rt, id) })
	o := sidecar.Options{
		Config: provider.Config{Home: c.home, Listen: c.listener.Addr().String(), Cron: provider.CronConfig{
			Provider: provider.Chronos,
			Chronos: provider.ChronosConfig{
				PortalURL: c.nasURL, CallbackURL: a.url, NASJWKSURL: c.nasURL + contract.PathJWKS,
				ExpectedAudience: contract.Audience(c.agent.instanceID), AccessToken: c.agent.token,
			},
		}},
		Logger: c.narrator.logger("agent"), Listener: c.listener, Notifier: a.ready,
		DrainTimeout: agentDrainTimeout, ReadyTimeout: keysWait,
		WrapVerifier: func(v agenthttp.FireVerifier) agenthttp.FireVerifier {
			a.verifier = observedVerifier{v: v, narrator: c.narrator}
			return a.verifier
		},
	}
	if d := provider.Decide(o.Config); !d.Chronos() {
		a.close()
		return nil, fmt.Errorf("demo: the agent would not use NAS: %s", d.Why())
	}
	life, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	go func() {
		defer close(a.done)
		a.err = sidecar.Run(life, o)
	}()
	return a, nil
}

// waitReady waits for the agent to have reconciled with NAS once and loaded
// NAS's key set, so the fires of jobs added now are verified.
func (a *agentSide) waitReady(ctx context.Context) error {
	select {
	case <-a.ready.c:
	case <-a.done:
		// Why it stopped is the agent's error, which stop returns.
		return errors.New("the agent stopped before it was ready")
	case <-ctx.Done():
		return ctx.Err()
	}
	return a.verifier.WaitReady(ctx)
}

// stop stops the agent: new fires are refused, runs in progress get
// agentDrainTimeout. It waits for the agent and returns why it stopped if
// that was a failure. It may be called more than once.
func (a *agentSide) stop() error {
	if a.cancel != nil {
		a.cancel()
		<-a.done
	}
	if a.err != nil {
		return fmt.Errorf("demo: %w", a.err)
	}
	return nil
}

// close stops the agent and closes the demo's runtime (within 5 s). It may
// be called more than once.
func (a *agentSide) close() {
	a.closeOnce.Do(func() {
		_ = a.stop()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.rt.Close(ctx)
		cancel()
	})
}

// readySignal is the agent's notifier: it closes c when the agent is ready.
type readySignal struct {
	c    chan struct{}
	once sync.Once
}

var _ sidecar.Notifier = (*readySignal)(nil)

func newReadySignal() *readySignal { return &readySignal{c: make(chan struct{})} }

// Ready implements sidecar.Notifier.
func (r *readySignal) Ready(context.Context, *slog.Logger, func(context.Context) error) {
	r.once.Do(func() { close(r.c) })
}

// Stopping implements sidecar.Notifier.
func (r *readySignal) Stopping(*slog.Logger) {}
