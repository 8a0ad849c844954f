package nas

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/chronoscron/chronos/relay"
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
	relay     *relayMetrics
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

// lagBuckets are the histogram buckets, in seconds, of the lag metrics.
var lagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// newMetrics registers NAS's metrics on a new registry; the engine feeds the
// store's gauges at scrape time.
func newMetrics(engine relay.Engine) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		fireLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chronos_nas_fire_lag_seconds",
			Help:    "Seconds between a fire's fire_at and its delivery to the agent.",
			Buckets: lagBuckets,
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
		&statsCollector{stats: engine.Stats}, newLostCollector(engine))
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

// statsCollector reads the engine's gauges on every scrape.
type statsCollector struct {
	stats func(context.Context) (relay.Stats, error)
}

var (
	descArmed  = prometheus.NewDesc("chronos_relay_armed", "One-shots armed or leased.", nil, nil)
	descDue    = prometheus.NewDesc("chronos_relay_due_backlog", "Armed one-shots already due (backlog).", nil, nil)
	descLeased = prometheus.NewDesc("chronos_relay_leased", "One-shots currently leased by a dispatcher.", nil, nil)
	descDead   = prometheus.NewDesc("chronos_relay_dead_letter", "Fires in the dead letter.", nil, nil)
	descUp     = prometheus.NewDesc("chronos_relay_store_up", "1 when the relay store answered the last scrape.", nil, nil)
)

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descArmed
	ch <- descDue
	ch <- descLeased
	ch <- descDead
	ch <- descUp
}

// Collect implements prometheus.Collector; a store error reports the store
// down and leaves the other gauges out.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(descArmed, prometheus.GaugeValue, float64(s.Armed))
	ch <- prometheus.MustNewConstMetric(descDue, prometheus.GaugeValue, float64(s.Due))
	ch <- prometheus.MustNewConstMetric(descLeased, prometheus.GaugeValue, float64(s.Leased))
	ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(s.DeadLetter))
}

// lostCollector reports chronos_relay_store_lost on every scrape.
type lostCollector struct {
	epoch relay.StoreEpoch // nil for an engine that cannot lose its data under NAS
}

// newLostCollector returns the collector of engine's lost-data gauge.
func newLostCollector(engine relay.Engine) *lostCollector {
	ep, _ := engine.(relay.StoreEpoch)
	return &lostCollector{epoch: ep}
}

var descLost = prometheus.NewDesc("chronos_relay_store_lost",
	"1 while a loss of the relay store's data (its epoch marker gone: Redis restarted without persistence, flushed) is reported; armed fires may be gone until agents arm them again.", nil, nil)

// Describe implements prometheus.Collector.
func (c *lostCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descLost }

// Collect implements prometheus.Collector; when the store cannot be asked,
// the gauge is left out (chronos_relay_store_up says why).
func (c *lostCollector) Collect(ch chan<- prometheus.Metric) {
	lost := 0.0
	if c.epoch != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.epoch.CheckEpoch(ctx)
		if err != nil {
			return
		}
		if st.Lost {
			lost = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.GaugeValue, lost)
}

// Relay returns a relay.Metrics that records what in-process dispatchers
// observe on the same registry.
func (m *Metrics) Relay() relay.Metrics {
	m.relayOnce.Do(func() {
		r := &relayMetrics{
			lag: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name:    "chronos_relay_dispatch_lag_seconds",
				Help:    "Seconds between a fire's fire_at and the start of its first delivery attempt.",
				Buckets: lagBuckets,
			}),
			outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "chronos_relay_outcomes_total",
				Help: "Delivery attempts by the dispatcher's verdict (done, retry, dead).",
			}, []string{"kind"}),
			retries: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "chronos_relay_retries_total",
				Help: "Retries scheduled by dispatchers; cold is true on the cold-start ladder.",
			}, []string{"cold"}),
			dead: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "chronos_relay_dead_lettered_total",
				Help: "Fires moved to the dead letter by dispatchers.",
			}),
			byKind: make(map[relay.OutcomeKind]prometheus.Counter),
		}
		for _, k := range []relay.OutcomeKind{relay.Done, relay.Retry, relay.Dead} {
			r.byKind[k] = r.outcomes.WithLabelValues(k.String())
		}
		r.cold = r.retries.WithLabelValues("true")
		r.warm = r.retries.WithLabelValues("false")
		m.Registry.MustRegister(r.lag, r.outcomes, r.retries, r.dead)
		m.relay = r
	})
	return m.relay
}

// relayMetrics records what in-process dispatchers observe.
type relayMetrics struct {
	lag      prometheus.Histogram
	outcomes *prometheus.CounterVec
	retries  *prometheus.CounterVec
	dead     prometheus.Counter

	// Counters bound once to their labels.
	byKind     map[relay.OutcomeKind]prometheus.Counter
	cold, warm prometheus.Counter
}

var _ relay.Metrics = (*relayMetrics)(nil)

// ObserveFireLag implements relay.Metrics.
func (r *relayMetrics) ObserveFireLag(lag time.Duration) { r.lag.Observe(max(lag.Seconds(), 0)) }

// CountOutcome implements relay.Metrics.
func (r *relayMetrics) CountOutcome(kind relay.OutcomeKind) {
	if c, ok := r.byKind[kind]; ok {
		c.Inc()
		return
	}
	r.outcomes.WithLabelValues(kind.String()).Inc()
}

// CountRetry implements relay.Metrics.
func (r *relayMetrics) CountRetry(cold bool) {
	if cold {
		r.cold.Inc()
		return
	}
	r.warm.Inc()
}

// CountDeadLetter implements relay.Metrics.
func (r *relayMetrics) CountDeadLetter() { r.dead.Inc() }
