package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
	"time"
)

// Systems, as results name them.
const (
	systemChronos      = "chronos"
	systemAsynqTuned   = "asynq-tuned"
	systemAsynqDefault = "asynq-default"
)

// Result is what one burst through one system measured. Lags are from each
// fire's due time to the moment it reached its handler (chronos: the
// agent sink; asynq: the no-op handler).
type Result struct {
	System string `json:"system"`
	Fires  int    `json:"fires"`
	// Handled counts fires that reached their handler once.
	Handled    int `json:"handled"`
	Lost       int `json:"lost"`
	Duplicates int `json:"duplicates"`
	// EnqueueSeconds is how long arming (chronos) or enqueueing (asynq)
	// the burst took; EnqueuedLate is set when it ended after the due time,
	// which then adds to every lag.
	EnqueueSeconds float64 `json:"enqueue_seconds"`
	EnqueuedLate   bool    `json:"enqueued_after_due"`
	// DrainSeconds runs from the due time (or the end of enqueueing, if
	// later) to the last fire handled; DrainRate is Handled over it.
	DrainSeconds float64 `json:"drain_seconds"`
	DrainRate    float64 `json:"drain_rate_per_s"`
	LagP50Ms     float64 `json:"lag_p50_ms"`
	LagP99Ms     float64 `json:"lag_p99_ms"`
	LagMaxMs     float64 `json:"lag_max_ms"`
	// CPUPerFireUs is the measuring process's CPU time (user and system)
	// from the end of enqueueing to the last fire, per fire handled.
	CPUPerFireUs float64 `json:"cpu_per_fire_us"`
	// RedisCPUFireUs is Redis's CPU time over the same span, per fire.
	RedisCPUFireUs float64 `json:"redis_cpu_per_fire_us"`
}

// Ratio compares chronos with one peer over the medians of the rounds.
type Ratio struct {
	Peer string `json:"peer"`
	// LagP99 is chronos's p99 lag over the peer's: above 1, chronos is
	// later.
	LagP99 float64 `json:"chronos_vs_peer_p99_lag"`
	// DrainRate is chronos's fires per second over the peer's: below 1,
	// chronos drains slower.
	DrainRate float64 `json:"chronos_vs_peer_drain_rate"`
	// CPUPerFire is chronos's CPU per fire over the peer's.
	CPUPerFire float64 `json:"chronos_vs_peer_cpu_per_fire"`
}

// Report is the whole comparison: every round's results in the order they
// ran, the per-system medians, and chronos against each peer.
type Report struct {
	Fires   int         `json:"fires"`
	Rounds  [][]*Result `json:"rounds"`
	Medians []*Result   `json:"medians"`
	Ratios  []Ratio     `json:"ratios"`
}

// newReport summarises rounds of results.
func newReport(fires int, rounds [][]*Result) *Report {
	rep := &Report{Fires: fires, Rounds: rounds}
	var order []string
	bySystem := map[string][]*Result{}
	for _, round := range rounds {
		for _, r := range round {
			if _, ok := bySystem[r.System]; !ok {
				order = append(order, r.System)
			}
			bySystem[r.System] = append(bySystem[r.System], r)
		}
	}
	for _, sys := range order {
		rep.Medians = append(rep.Medians, medianResult(sys, bySystem[sys]))
	}
	var chronos *Result
	for _, m := range rep.Medians {
		if m.System == systemChronos {
			chronos = m
		}
	}
	if chronos == nil {
		return rep
	}
	for _, m := range rep.Medians {
		if m.System == systemChronos {
			continue
		}
		rep.Ratios = append(rep.Ratios, Ratio{
			Peer:       m.System,
			LagP99:     ratio(chronos.LagP99Ms, m.LagP99Ms),
			DrainRate:  ratio(chronos.DrainRate, m.DrainRate),
			CPUPerFire: ratio(chronos.CPUPerFireUs, m.CPUPerFireUs),
		})
	}
	return rep
}

// medianResult is the field-by-field median of one system's results; counts
// of lost and duplicate fires are summed instead, so none is hidden.
func medianResult(system string, rs []*Result) *Result {
	m := &Result{System: system}
	field := func(get func(*Result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		return median(vs)
	}
	m.Fires = int(field(func(r *Result) float64 { return float64(r.Fires) }))
	m.Handled = int(field(func(r *Result) float64 { return float64(r.Handled) }))
	for _, r := range rs {
		m.Lost += r.Lost
		m.Duplicates += r.Duplicates
		m.EnqueuedLate = m.EnqueuedLate || r.EnqueuedLate
	}
	m.EnqueueSeconds = field(func(r *Result) float64 { return r.EnqueueSeconds })
	m.DrainSeconds = field(func(r *Result) float64 { return r.DrainSeconds })
	m.DrainRate = field(func(r *Result) float64 { return r.DrainRate })
	m.LagP50Ms = field(func(r *Result) float64 { return r.LagP50Ms })
	m.LagP99Ms = field(func(r *Result) float64 { return r.LagP99Ms })
	m.LagMaxMs = field(func(r *Result) float64 { return r.LagMaxMs })
	m.CPUPerFireUs = field(func(r *Result) float64 { return r.CPUPerFireUs })
	m.RedisCPUFireUs = field(func(r *Result) float64 { return r.RedisCPUFireUs })
	return m
}

// median of vs: the middle value, or the mean of the two middle values.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*1000) / 1000
}

// percentile of sorted lags, nearest rank (as chronos bench relay counts).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms is d in milliseconds, to two decimals.
func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// WriteText prints a table per round, the medians and the ratios.
func (rep *Report) WriteText(w io.Writer) {
	for i, round := range rep.Rounds {
		fmt.Fprintf(w, "round %d: %d fires due at the same instant\n", i+1, rep.Fires)
		writeTable(w, round)
		fmt.Fprintln(w)
	}
	if len(rep.Rounds) > 1 {
		fmt.Fprintf(w, "median of %d rounds (lost and duplicates: summed)\n", len(rep.Rounds))
		writeTable(w, rep.Medians)
		fmt.Fprintln(w)
	}
	for _, r := range rep.Ratios {
		fmt.Fprintf(w, "chronos ÷ %s: p99 lag %.2f×, fires/s %.2f×, CPU per fire %.2f×\n", r.Peer, r.LagP99, r.DrainRate, r.CPUPerFire)
	}
}

func writeTable(w io.Writer, rs []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tp50 lag\tp99 lag\tmax lag\tfires/s\tCPU/fire\tRedis CPU/fire\tenqueue\tlost\tdup\t")
	for _, r := range rs {
		late := ""
		if r.EnqueuedLate {
			late = " (late)"
		}
		fmt.Fprintf(tw, "%s\t%.3f s\t%.3f s\t%.3f s\t%.0f\t%.0f µs\t%.0f µs\t%.2f s%s\t%d\t%d\t\n",
			r.System, r.LagP50Ms/1000, r.LagP99Ms/1000, r.LagMaxMs/1000, r.DrainRate,
			r.CPUPerFireUs, r.RedisCPUFireUs, r.EnqueueSeconds, late, r.Lost, r.Duplicates)
	}
	_ = tw.Flush()
}
