package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/fireauth"
	agenthttp "github.com/chronoscron/chronos/agent/http"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/provider"
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

// agentSide is the agent running in the demo's process: a runtime on the
// home, the fire endpoint with a narrated token verifier, and the
// reconciler that arms the jobs at NAS once startReconciling is called.
type agentSide struct {
	url      string
	rt       *agent.Runtime
	verifier *fireauth.JWTVerifier
	rec      *provider.Reconciler

	life      context.Context // ends at close; what the agent's goroutines run under
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// startAgent opens the agent on c.home and serves its fire endpoint on
// c.listener until ctx ends or close.
func startAgent(ctx context.Context, c agentConfig) (*agentSide, error) {
	ctx, cancel := context.WithCancel(ctx)
	a := &agentSide{url: "http://" + c.listener.Addr().String(), life: ctx, cancel: cancel}
	log := c.narrator.logger("agent")
	rt, err := agent.Open(ctx, agent.Config{Home: c.home, Logger: log})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("demo: %w", err)
	}
	a.rt = rt
	c.narrator.setRanDetail(func(jobID, runID string) string { return runDetail(rt, c.home, jobID, runID) })
	a.verifier, err = fireauth.New(ctx, fireauth.Config{
		JWKSURL: c.nasURL + contract.PathJWKS, Issuer: c.nasURL,
		Audience: contract.Audience(c.agent.instanceID), Logger: log,
	})
	if err != nil {
		a.close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	nc, err := nasclient.New(nasclient.Config{PortalURL: c.nasURL, AccessToken: c.agent.token, Logger: log})
	if err == nil {
		a.rec, err = provider.NewReconciler(provider.ReconcilerConfig{
			Source: rt, NAS: nc, CallbackURL: a.url, Home: c.home, By: "agent", CatchUp: true, Logger: log,
		})
	}
	if err != nil {
		a.close()
		return nil, fmt.Errorf("demo: %w", err)
	}
	a.serve(ctx, c.listener, c.narrator)
	return a, nil
}

// serve serves the fire endpoint on ln until ctx ends.
func (a *agentSide) serve(ctx context.Context, ln net.Listener, n *narrator) {
	v := a.verifier
	fireSrv := agenthttp.New(agenthttp.Config{
		Firer: a.rt, Verifier: observedVerifier{v: v, narrator: n}, Logger: n.logger("agenthttp"),
		Checks: map[string]agenthttp.Check{"jwks": func(context.Context) error {
			if !v.Ready() {
				return errors.New("NAS's keys are not loaded yet")
			}
			return nil
		}},
	})
	srv := agenthttp.NewHTTPServer(fireSrv)
	a.wg.Go(func() { _ = srv.Serve(ln) })
	a.wg.Go(func() { shutdownAtEnd(ctx, srv) })
}

// shutdownAtEnd shuts srv down, within 5 s, once ctx ends.
func shutdownAtEnd(ctx context.Context, srv *http.Server) {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
}

// waitKeys waits for the agent to have NAS's key set.
func (a *agentSide) waitKeys(ctx context.Context) error { return a.verifier.WaitReady(ctx) }

// startReconciling starts arming the agent's jobs at NAS, now and on every
// change, until the agent stops.
func (a *agentSide) startReconciling() {
	a.wg.Go(func() { _ = a.rec.Run(a.life, a.rt.Changes()) })
}

// close stops the agent, waits for it and closes its runtime (within 5 s)
// and verifier. It may be called more than once.
func (a *agentSide) close() {
	a.closeOnce.Do(func() {
		a.cancel()
		a.wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.rt.Close(ctx)
		cancel()
		if a.verifier != nil {
			a.verifier.Close()
		}
	})
}
