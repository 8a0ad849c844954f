package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestLoggersWriteDurationText: the JSON loggers of nas, relay and agent
// serve write any time.Duration attribute, grouped or not, as a Go duration
// string, whatever the call site passed.
func TestLoggersWriteDurationText(t *testing.T) {
	t.Parallel()
	agentLog := func(w *bytes.Buffer) *slog.Logger {
		l, err := jsonLogger(w, "agent: --log-level", "info")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	nasLog := func(w *bytes.Buffer) *slog.Logger {
		l, err := jsonLogger(w, "log_level", "info")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for name, mk := range map[string]func(*bytes.Buffer) *slog.Logger{
		"nas and relay": nasLog,
		"agent":         agentLog,
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			mk(&buf).With(slog.Group("g", "timeout", 30*time.Second)).Info("x", "retry_in", 276*time.Millisecond, "lag_ms", int64(12), "n", 3)
			var rec struct {
				RetryIn any            `json:"retry_in"`
				LagMS   any            `json:"lag_ms"`
				N       any            `json:"n"`
				G       map[string]any `json:"g"`
			}
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("%v: %s", err, buf.Bytes())
			}
			if rec.RetryIn != "276ms" || rec.G["timeout"] != "30s" || rec.LagMS != float64(12) || rec.N != float64(3) {
				t.Fatalf("got %s", buf.Bytes())
			}
		})
	}
}
