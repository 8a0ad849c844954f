package relaybench

import (
	"fmt"
	"io"
)

// WriteText writes the result for people.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "store %s, %d fires (%s), %d agents, %d dispatchers × %d concurrency in %s, delivery %s, %s tokens\n",
		r.Store, r.Fires, r.Mode, r.Agents, r.Dispatchers, r.Concurrency, dispatchPlace(r.Dispatch), r.Delivery, r.SigningAlg)
	late := ""
	if r.ArmedLate {
		late = " (arming ended after the first fire_at: lags include arming)"
	}
	fmt.Fprintf(w, "arm:    %.0f/s (%.2fs)%s\n", r.ArmRate, r.ArmSeconds, late)
	fmt.Fprintf(w, "drain:  %.0f fires/s (%.2fs)\n", r.DrainRate, r.DrainSeconds)
	fmt.Fprintf(w, "lag:    p50 %.1fms  p99 %.1fms  max %.1fms after fire_at\n", r.LagP50Ms, r.LagP99Ms, r.LagMaxMs)
	if r.Neighbours != nil {
		r.Neighbours.writeText(w)
	}
	switch {
	case r.BytesPerArmed > 0:
		fmt.Fprintf(w, "redis:  %.0f bytes per armed one-shot, %.0fµs Redis CPU per fire\n", r.BytesPerArmed, r.RedisCPUFireUs)
	case r.RedisCPUFireUs > 0:
		fmt.Fprintf(w, "redis:  bytes per armed one-shot not measured (Redis freed other keys meanwhile), %.0fµs Redis CPU per fire\n", r.RedisCPUFireUs)
	}
	if r.PostgresBytesPerArmed > 0 {
		fmt.Fprintf(w, "postgres: %.0f bytes per armed one-shot (tables, indexes, TOAST)", r.PostgresBytesPerArmed)
		if r.PostgresCPUFireUs > 0 {
			fmt.Fprintf(w, ", %.0fµs PostgreSQL CPU per fire", r.PostgresCPUFireUs)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "cpu:    %.0fµs per fire, %.0f fires per CPU second (this process: NAS, dispatchers, agent sink; %.2f CPU s)\n",
		r.CPUPerFireUs, r.FiresPerCPUSecond, r.CPUSeconds)
	fmt.Fprintf(w, "tokens: %d verified, %d failed; %d duplicates; %d lost; %d left in the store\n",
		r.Verified, r.Failed, r.Duplicates, r.Lost, r.LeftInStore)
}

// Comparison is a mediated run and a direct run of the same burst.
type Comparison struct {
	NAS    *Result `json:"nas"`
	Direct *Result `json:"direct"`
	// DirectPerCPU is the direct run's fires per CPU second over the
	// mediated run's.
	DirectPerCPU float64 `json:"direct_vs_nas_fires_per_cpu_second"`
	// DirectDrain is the direct run's drain rate over the mediated run's.
	DirectDrain float64 `json:"direct_vs_nas_drain_rate"`
}

// Compare returns the comparison of a mediated and a direct run.
func Compare(mediated, direct *Result) Comparison {
	c := Comparison{NAS: mediated, Direct: direct}
	if mediated.FiresPerCPUSecond > 0 {
		c.DirectPerCPU = direct.FiresPerCPUSecond / mediated.FiresPerCPUSecond
	}
	if mediated.DrainRate > 0 {
		c.DirectDrain = direct.DrainRate / mediated.DrainRate
	}
	return c
}

// WriteText writes both runs and their ratios for people.
func (c Comparison) WriteText(w io.Writer) {
	fmt.Fprintln(w, "== delivery nas (NAS signs each fire)")
	c.NAS.WriteText(w)
	fmt.Fprintln(w, "== delivery direct (each job's cron key signs its fires)")
	c.Direct.WriteText(w)
	fmt.Fprintf(w, "direct vs nas: %.2f× the fires per CPU second (%.0f vs %.0f), %.2f× the drain rate\n",
		c.DirectPerCPU, c.Direct.FiresPerCPUSecond, c.NAS.FiresPerCPUSecond, c.DirectDrain)
}

// dispatchPlace names where a run's dispatchers ran.
func dispatchPlace(dispatch string) string {
	if dispatch == DispatchRelay {
		return "a relay process"
	}
	return "NAS"
}
