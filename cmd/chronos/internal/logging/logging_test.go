package logging_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/cmd/chronos/internal/logging"
)

func TestParseLevel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "Warn": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := logging.ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "warn+2", "loud"} {
		if _, err := logging.ParseLevel(in); err == nil {
			t.Errorf("ParseLevel(%q) passed", in)
		}
	}
}

func TestNewJSONWritesDurationsAsText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logging.NewJSON(&buf, slog.LevelInfo).Info("x", "retry_in", 276*time.Millisecond)
	logging.NewJSON(&buf, slog.LevelInfo).Debug("hidden")
	if out := buf.String(); !strings.Contains(out, `"retry_in":"276ms"`) || strings.Contains(out, "hidden") {
		t.Fatalf("log %s", out)
	}
}
