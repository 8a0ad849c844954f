package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	relaymetrics "github.com/chronoscron/chronos/relay/metrics"
)

// relayProcessMetrics are the Prometheus metrics of a `chronos relay`
// process: the relay's own (relay/metrics, the names NAS serves) and the
// Go runtime's.
type relayProcessMetrics struct {
	registry *prometheus.Registry
	dispatch *relaymetrics.Dispatch // shared by the process's dispatchers
}

// newRelayProcessMetrics registers the metrics; engine feeds the store's
// gauges at scrape time.
func newRelayProcessMetrics(engine relay.Engine) *relayProcessMetrics {
	m := &relayProcessMetrics{registry: prometheus.NewRegistry(), dispatch: relaymetrics.NewDispatch()}
	m.registry.MustRegister(m.dispatch, relaymetrics.NewStore(engine),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// relayOpsServer serves health, readiness (the store answers and has not
// lost its data, as NAS's /readyz checks it) and metrics.
func relayOpsServer(engine relay.Engine, m *relayProcessMetrics) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, contract.HealthResponse{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		resp, status := contract.HealthResponse{Status: "ok", Checks: map[string]string{}}, http.StatusOK
		for name, err := range relay.CheckStore(ctx, engine) {
			if err != nil {
				resp.Status, status = "unavailable", http.StatusServiceUnavailable
				resp.Checks[name] = err.Error()
				continue
			}
			resp.Checks[name] = "ok"
		}
		writeHealth(w, status, resp)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// writeHealth writes a health answer.
func writeHealth(w http.ResponseWriter, status int, resp contract.HealthResponse) {
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}
