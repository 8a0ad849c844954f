package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHealthcheck runs `chronos healthcheck` against answers of every kind:
// 2xx is exit 0, any other status, a refused connection and a slow answer
// exit 1 with a message saying which, and a URL or timeout that is not
// valid is bad usage (exit 2) without a request.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "store: not reachable", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		name       string
		args       []string
		code       int
		out, err   string
		noRequests bool
	}{
		{"2xx", []string{srv.URL + "/ok"}, exitOK, "204 No Content in", "", false},
		{"503 with its body", []string{srv.URL + "/readyz"}, exitFailure, "", "unhealthy: 503 Service Unavailable after", false},
		{"404", []string{srv.URL + "/nothing"}, exitFailure, "", "404 Not Found", false},
		{"a redirect is not followed", []string{srv.URL + "/moved"}, exitFailure, "", "302 Found", false},
		{"refused", []string{closed.URL + "/readyz"}, exitFailure, "", "connection refused", false},
		{"timeout", []string{"--timeout", "200ms", srv.URL + "/slow"}, exitFailure, "", "no answer within 200ms", false},
		{"not a URL", []string{"127.0.0.1:8080/readyz"}, exitUsage, "", "want an http:// or https:// URL", true},
		{"another scheme", []string{"ftp://127.0.0.1/readyz"}, exitUsage, "", "want an http:// or https:// URL", true},
		{"no host", []string{"http:///readyz"}, exitUsage, "", "no host", true},
		{"zero timeout", []string{"--timeout", "0s", srv.URL + "/ok"}, exitUsage, "", "--timeout 0s", true},
		{"no URL", nil, exitUsage, "", "accepts 1 arg", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := requests.Load()
			code, out, errOut := nasRunCLI(t, append([]string{"healthcheck"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out, errOut)
			}
			if !strings.Contains(out, tt.out) || !strings.Contains(errOut, tt.err) {
				t.Errorf("stdout %q (want %q), stderr %q (want %q)", out, tt.out, errOut, tt.err)
			}
			if n := requests.Load() - before; tt.noRequests && n != 0 {
				t.Errorf("an invalid command line sent %d requests", n)
			}
		})
	}
}
