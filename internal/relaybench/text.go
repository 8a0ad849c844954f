package relaybench

import (
	"fmt"
	"io"
)

// WriteText writes the result for people.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "store %s, %d fires (%s), %d agents, %d dispatchers × %d concurrency, %s tokens\n",
		r.Store, r.Fires, r.Mode, r.Agents, r.Dispatchers, r.Concurrency, r.SigningAlg)
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
	fmt.Fprintf(w, "cpu:    %.0fµs per fire (this process: NAS, dispatchers, agent sink)\n", r.CPUPerFireUs)
	fmt.Fprintf(w, "tokens: %d verified, %d failed; %d duplicates; %d lost; %d left in the store\n",
		r.Verified, r.Failed, r.Duplicates, r.Lost, r.LeftInStore)
}
