package agenthttp

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
)

// chainSource is implemented by firers that keep chains (*agent.Runtime);
// the chain metrics are read from its store at scrape time, so they count
// what every process on the home did (a spawn is made by the run's own
// `chronos chain` process).
type chainSource interface {
	Chains(ctx context.Context, f agent.ChainFilter) ([]chain.Chain, error)
	Breakers(ctx context.Context) ([]chain.Breaker, error)
}

var (
	descChains = prometheus.NewDesc("chronos_agent_chains",
		"Chains in the agent's store by state (closed ones as kept: the newest 200).", []string{"state"}, nil)
	descBreakerOpenings = prometheus.NewDesc("chronos_agent_chain_breaker_openings_total",
		"Openings of each chain class's circuit breaker.", []string{"class"}, nil)
	descSpawnsRefused = prometheus.NewDesc("chronos_agent_chain_spawns_refused_total",
		"Chain starts and spawns refused, by reason: duplicate, limit, breaker_open, closed.", []string{"reason"}, nil)
)

var chainDescs = []*prometheus.Desc{descChains, descBreakerOpenings, descSpawnsRefused}

// collectChains sends the chain metrics of src.
func collectChains(ctx context.Context, src chainSource, ch chan<- prometheus.Metric) {
	chains, err := src.Chains(ctx, agent.ChainFilter{})
	if err != nil {
		return
	}
	breakers, err := src.Breakers(ctx)
	if err != nil {
		return
	}
	byState := map[chain.State]int{}
	for _, c := range chains {
		byState[c.State]++
	}
	for _, s := range chain.States {
		ch <- prometheus.MustNewConstMetric(descChains, prometheus.GaugeValue, float64(byState[s]), string(s))
	}
	refused := map[string]int{}
	for _, b := range breakers {
		ch <- prometheus.MustNewConstMetric(descBreakerOpenings, prometheus.CounterValue, float64(b.Openings), b.Class)
		for r, n := range b.Refusals {
			refused[r] += n
		}
	}
	for _, r := range chain.RefusalReasons {
		ch <- prometheus.MustNewConstMetric(descSpawnsRefused, prometheus.CounterValue, float64(refused[r]), r)
	}
}
