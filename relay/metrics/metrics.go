package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chronoscron/chronos/relay"
)

// LagBuckets are the histogram buckets, in seconds, of the lag metrics.
var LagBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// scrapeTimeout bounds the store calls of one scrape.
const scrapeTimeout = 5 * time.Second

var (
	descArmed  = prometheus.NewDesc("chronos_relay_armed", "One-shots armed or leased.", nil, nil)
	descDue    = prometheus.NewDesc("chronos_relay_due_backlog", "Armed one-shots already due (backlog).", nil, nil)
	descLeased = prometheus.NewDesc("chronos_relay_leased", "One-shots currently leased by a dispatcher.", nil, nil)
	descDead   = prometheus.NewDesc("chronos_relay_dead_letter", "Fires in the dead letter.", nil, nil)
	descHeld   = prometheus.NewDesc("chronos_relay_held_fires",
		"Due one-shots held back by flow control: their agent is at its parallelism or rate, probed, or disabled.", nil, nil)
	descProbing = prometheus.NewDesc("chronos_relay_probing_agents",
		"Agents whose fires go out one at a time because a delivery found them not answering.", nil, nil)
	descUp   = prometheus.NewDesc("chronos_relay_store_up", "1 when the relay store answered the last scrape.", nil, nil)
	descLost = prometheus.NewDesc("chronos_relay_store_lost",
		"1 while a loss of the relay store's data (its epoch marker gone or replaced: Redis restarted without persistence or flushed, PostgreSQL restored from elsewhere) is reported; armed fires may be gone until agents arm them again.", nil, nil)
)

// Store reads the store's gauges from an engine on every scrape.
type Store struct {
	engine relay.Engine
	epoch  relay.StoreEpoch // nil for an engine that cannot lose its data under its processes
}

var _ prometheus.Collector = (*Store)(nil)

// NewStore returns the collector of engine's gauges.
func NewStore(engine relay.Engine) *Store {
	ep, _ := engine.(relay.StoreEpoch)
	return &Store{engine: engine, epoch: ep}
}

// Describe implements prometheus.Collector.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descArmed, descDue, descLeased, descDead, descHeld, descProbing, descUp, descLost} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A store that does not answer is
// reported down (chronos_relay_store_up 0) and the other gauges are left
// out; chronos_relay_store_lost is 0 on an engine that cannot lose its
// data, and left out when the epoch cannot be checked.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	st, err := s.engine.Stats(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(descArmed, prometheus.GaugeValue, float64(st.Armed))
	ch <- prometheus.MustNewConstMetric(descDue, prometheus.GaugeValue, float64(st.Due))
	ch <- prometheus.MustNewConstMetric(descLeased, prometheus.GaugeValue, float64(st.Leased))
	ch <- prometheus.MustNewConstMetric(descDead, prometheus.GaugeValue, float64(st.DeadLetter))
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(st.Held))
	ch <- prometheus.MustNewConstMetric(descProbing, prometheus.GaugeValue, float64(st.Probing))
	lost := 0.0
	if s.epoch != nil {
		es, err := s.epoch.CheckEpoch(ctx)
		if err != nil {
			return
		}
		if es.Lost {
			lost = 1
		}
	}
	ch <- prometheus.MustNewConstMetric(descLost, prometheus.GaugeValue, lost)
}

// Dispatch records what dispatchers observe. One Dispatch serves every
// dispatcher of a process; it is safe for concurrent use.
type Dispatch struct {
	lag      prometheus.Histogram
	outcomes *prometheus.CounterVec
	retries  *prometheus.CounterVec
	dead     prometheus.Counter

	// Counters bound once to their labels: a label lookup per fire hashes
	// and locks for nothing.
	byKind     map[relay.OutcomeKind]prometheus.Counter
	cold, warm prometheus.Counter
}

var (
	_ relay.Metrics        = (*Dispatch)(nil)
	_ prometheus.Collector = (*Dispatch)(nil)
)

// NewDispatch returns the dispatchers' metrics, every label value present
// from the start; register it on the process's registry.
func NewDispatch() *Dispatch {
	d := &Dispatch{
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chronos_relay_dispatch_lag_seconds",
			Help:    "Seconds between a fire's fire_at and the start of its first delivery attempt.",
			Buckets: LagBuckets,
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
		d.byKind[k] = d.outcomes.WithLabelValues(k.String())
	}
	d.cold = d.retries.WithLabelValues("true")
	d.warm = d.retries.WithLabelValues("false")
	return d
}

// Describe implements prometheus.Collector.
func (d *Dispatch) Describe(ch chan<- *prometheus.Desc) {
	d.lag.Describe(ch)
	d.outcomes.Describe(ch)
	d.retries.Describe(ch)
	d.dead.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Dispatch) Collect(ch chan<- prometheus.Metric) {
	d.lag.Collect(ch)
	d.outcomes.Collect(ch)
	d.retries.Collect(ch)
	d.dead.Collect(ch)
}

// ObserveFireLag implements relay.Metrics.
func (d *Dispatch) ObserveFireLag(lag time.Duration) { d.lag.Observe(max(lag.Seconds(), 0)) }

// CountOutcome implements relay.Metrics.
func (d *Dispatch) CountOutcome(kind relay.OutcomeKind) {
	if c, ok := d.byKind[kind]; ok {
		c.Inc()
		return
	}
	d.outcomes.WithLabelValues(kind.String()).Inc()
}

// CountRetry implements relay.Metrics: the cold label is "true" on the
// cold-start ladder.
func (d *Dispatch) CountRetry(ladder relay.Ladder) {
	if ladder == relay.ColdStartLadder {
		d.cold.Inc()
		return
	}
	d.warm.Inc()
}

// CountDeadLetter implements relay.Metrics.
func (d *Dispatch) CountDeadLetter() { d.dead.Inc() }
