package nas

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chronoscron/chronos/relay"
	relaymetrics "github.com/chronoscron/chronos/relay/metrics"
)

// Metrics are NAS's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry   *prometheus.Registry
	fireLag    prometheus.Histogram
	deliveries *prometheus.CounterVec
	retries    prometheus.Counter
	requests   *prometheus.CounterVec

	// byOutcome holds the deliveries counter of each outcome, bound once:
	// a label lookup per fire hashes and locks for nothing.
	byOutcome map[string]prometheus.Counter
	// byRoute caches the requests counter of each route and code seen.
	byRoute sync.Map // routeCode → prometheus.Counter

	relayOnce sync.Once
	relay     *relaymetrics.Dispatch
}

// Delivery outcomes counted by chronos_nas_deliveries_total.
const (
	deliveryDelivered       = "delivered"
	deliveryRejected        = "rejected"
	deliveryRetry           = "retry"
	deliveryDropped         = "dropped"
	deliveryDuplicate       = "duplicate"
	deliveryInstanceStopped = "instance_stopped"
)

// newMetrics registers NAS's metrics on a new registry; the engine feeds the
// store's gauges at scrape time.
func newMetrics(engine relay.Engine) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		fireLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chronos_nas_fire_lag_seconds",
			Help:    "Seconds between a fire's fire_at and its delivery to the agent.",
			Buckets: relaymetrics.LagBuckets,
		}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_nas_deliveries_total",
			Help: "Relayed fires by outcome (delivered, rejected, retry, dropped, duplicate, instance_stopped).",
		}, []string{"outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chronos_nas_retries_total",
			Help: "Relayed fires that were a retry (attempt > 1).",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chronos_nas_api_requests_total",
			Help: "Agent API calls by route and status code.",
		}, []string{"route", "code"}),
	}
	m.byOutcome = make(map[string]prometheus.Counter)
	for _, o := range []string{deliveryDelivered, deliveryRejected, deliveryRetry, deliveryDropped, deliveryDuplicate, deliveryInstanceStopped} {
		m.byOutcome[o] = m.deliveries.WithLabelValues(o)
	}
	reg.MustRegister(m.fireLag, m.deliveries, m.retries, m.requests,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		relaymetrics.NewStore(engine))
	return m
}

// countDelivery counts one relayed fire by outcome.
func (m *Metrics) countDelivery(outcome string) {
	if c, ok := m.byOutcome[outcome]; ok {
		c.Inc()
		return
	}
	m.deliveries.WithLabelValues(outcome).Inc()
}

// routeCode keys the cached requests counters.
type routeCode struct {
	route string
	code  int
}

// ObserveRequest counts one API call.
func (m *Metrics) ObserveRequest(route string, code int) {
	k := routeCode{route, code}
	if c, ok := m.byRoute.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c, _ := m.byRoute.LoadOrStore(k, m.requests.WithLabelValues(route, itoa(code)))
	c.(prometheus.Counter).Inc()
}

// itoa formats an HTTP status code as its label, "other" when out of range.
func itoa(n int) string {
	if n >= 100 && n < 600 {
		return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
	}
	return "other"
}

// Relay returns a relay.Metrics that records what in-process dispatchers
// observe on the same registry (relay/metrics: the names a relay process
// serves too).
func (m *Metrics) Relay() relay.Metrics {
	m.relayOnce.Do(func() {
		m.relay = relaymetrics.NewDispatch()
		m.Registry.MustRegister(m.relay)
	})
	return m.relay
}
