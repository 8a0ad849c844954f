package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chronoscron/chronos/relay"
)

// relayProcessMetrics are the Prometheus metrics of a `chronos relay`
// process: what its dispatchers observe, and the store's gauges.
type relayProcessMetrics struct {
	registry *prometheus.Registry
	lag      prometheus.Histogram
	outcomes *prometheus.CounterVec
	retries  *prometheus.CounterVec
	dead     prometheus.Counter
}

var _ relay.Metrics = (*relayProcessMetrics)(nil)

// newRelayProcessMetrics registers the metrics; stats feeds the gauges.
func newRelayProcessMetrics(stats func(context.Context) (relay.Stats, error)) *relayProcessMetrics {
	m := &relayProcessMetrics{
		registry: prometheus.NewRegistry(),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chronos_relay_fire_lag_seconds",
			Help:    "Seconds between a fire's fire_at and the start of its first delivery attempt.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_relay_deliveries_total",
			Help: "Delivery attempts by outcome (done, retry, dead).",
		}, []string{"outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_relay_retries_total",
			Help: "Retries scheduled, by ladder (cold start or backoff).",
		}, []string{"ladder"}),
		dead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chronos_relay_dead_letters_total",
			Help: "Fires moved to the dead letter by this process.",
		}),
	}
	for _, k := range []relay.OutcomeKind{relay.Done, relay.Retry, relay.Dead} {
		m.outcomes.WithLabelValues(k.String())
	}
	m.registry.MustRegister(m.lag, m.outcomes, m.retries, m.dead,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&relayStatsCollector{stats: stats})
	return m
}

// ObserveFireLag implements relay.Metrics.
func (m *relayProcessMetrics) ObserveFireLag(lag time.Duration) { m.lag.Observe(max(lag.Seconds(), 0)) }

// CountOutcome implements relay.Metrics.
func (m *relayProcessMetrics) CountOutcome(kind relay.OutcomeKind) {
	m.outcomes.WithLabelValues(kind.String()).Inc()
}

// CountRetry implements relay.Metrics.
func (m *relayProcessMetrics) CountRetry(cold bool) {
	ladder := "backoff"
	if cold {
		ladder = "cold_start"
	}
	m.retries.WithLabelValues(ladder).Inc()
}

// CountDeadLetter implements relay.Metrics.
func (m *relayProcessMetrics) CountDeadLetter() { m.dead.Inc() }

// relayStatsCollector reads the store's gauges at scrape time.
type relayStatsCollector struct {
	stats func(context.Context) (relay.Stats, error)
}

var (
	descArmed  = prometheus.NewDesc("chronos_relay_armed", "One-shots armed or leased in the store.", nil, nil)
	descDue    = prometheus.NewDesc("chronos_relay_due_backlog", "Armed one-shots already due.", nil, nil)
	descLeased = prometheus.NewDesc("chronos_relay_leased", "One-shots under a lease.", nil, nil)
	descDead   = prometheus.NewDesc("chronos_relay_dead_letter_size", "Fires in the dead letter.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *relayStatsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descArmed
	ch <- descDue
	ch <- descLeased
	ch <- descDead
}

// Collect implements prometheus.Collector; a store error leaves the gauges out.
func (c *relayStatsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descArmed, prometheus.GaugeValue, float64(s.Armed))
	ch <- prometheus.MustNewConstMetric(descDue, prometheus.GaugeValue, float64(s.Due))
	ch <- prometheus.MustNewConstMetric(descLeased, prometheus.GaugeValue, float64(s.Leased))
	ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(s.DeadLetter))
}
