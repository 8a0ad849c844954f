package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// chronosRun is one burst through `chronos bench relay`: the full chain
// (store, dispatchers, NAS minting an ES256 token per fire, an HTTP call to
// an agent sink that verifies it), in a child process.
type chronosRun struct {
	binary   string
	redisURL string
	n        int
	at       time.Duration
}

// chronosResult is the part of `chronos bench relay --json` compared here.
type chronosResult struct {
	Fires          int     `json:"fires"`
	ArmSeconds     float64 `json:"arm_seconds"`
	ArmedLate      bool    `json:"armed_after_first_fire_at"`
	DrainSeconds   float64 `json:"drain_seconds"`
	DrainRate      float64 `json:"drain_rate_per_s"`
	LagP50Ms       float64 `json:"lag_p50_ms"`
	LagP99Ms       float64 `json:"lag_p99_ms"`
	LagMaxMs       float64 `json:"lag_max_ms"`
	CPUPerFireUs   float64 `json:"cpu_per_fire_us"`
	RedisCPUFireUs float64 `json:"redis_cpu_per_fire_us"`
	Delivered      int     `json:"delivered"`
	Duplicates     int     `json:"duplicates"`
	Lost           int     `json:"lost"`
}

// args is the command line of the run.
func (c chronosRun) args() []string {
	return []string{"bench", "relay", "--store", c.redisURL, "--n", fmt.Sprint(c.n),
		"--at", "+" + c.at.String(), "--json"}
}

// run runs the command and reads its JSON. chronos bench relay prints its
// result even when it exits 1 (a fire lost or a token refused): that result
// comes back with the error.
func (c chronosRun) run(ctx context.Context) (*Result, error) {
	cmd := exec.CommandContext(ctx, c.binary, c.args()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var cr chronosResult
	if err := json.Unmarshal(stdout.Bytes(), &cr); err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("chronos %s: %w: %s", strings.Join(c.args(), " "), runErr, tail(stderr.String()))
		}
		return nil, fmt.Errorf("chronos bench relay: reading its JSON: %w", err)
	}
	res := &Result{
		System: systemChronos, Fires: cr.Fires, Handled: cr.Delivered, Lost: cr.Lost, Duplicates: cr.Duplicates,
		EnqueueSeconds: cr.ArmSeconds, EnqueuedLate: cr.ArmedLate,
		DrainSeconds: cr.DrainSeconds, DrainRate: cr.DrainRate,
		LagP50Ms: cr.LagP50Ms, LagP99Ms: cr.LagP99Ms, LagMaxMs: cr.LagMaxMs,
		CPUPerFireUs: cr.CPUPerFireUs, RedisCPUFireUs: cr.RedisCPUFireUs,
	}
	if runErr != nil {
		return res, fmt.Errorf("chronos bench relay: %w: %s", runErr, tail(stderr.String()))
	}
	return res, nil
}

// tail is the end of a command's error output, enough to say what failed.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}
