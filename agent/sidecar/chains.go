package sidecar

import (
	"context"
	"time"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/provider"
)

// readChains fills in the open chains and the open class breakers.
func (r *Report) readChains(ctx context.Context, rt *agent.Runtime) {
	r.Chains, r.Breakers = []chain.Chain{}, []chain.Breaker{}
	chains, err := rt.Chains(ctx, agent.ChainFilter{})
	if err != nil {
		r.Errors = append(r.Errors, provider.ErrorEntry{At: time.Now(), Op: "read chains", Error: err.Error()})
		return
	}
	for _, c := range chains {
		if c.Open() {
			r.Chains = append(r.Chains, c)
		}
	}
	breakers, err := rt.Breakers(ctx)
	if err != nil {
		r.Errors = append(r.Errors, provider.ErrorEntry{At: time.Now(), Op: "read chain breakers", Error: err.Error()})
		return
	}
	now := time.Now()
	for _, b := range breakers {
		if b.IsOpen(now) {
			r.Breakers = append(r.Breakers, b)
		}
	}
}
