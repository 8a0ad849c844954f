// Package logging builds the JSON loggers of the Chronos processes (NAS, the
// relay, the agent) with one reading of log levels and one way of writing
// durations.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// ParseLevel reads a log level as NAS, the relay and the agent accept it:
// debug, info, warn or error, in any case. slog's offsets ("warn+2") are not
// accepted: they are no level an operator can look up.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not debug, info, warn or error", level)
}

// DurationText is a slog ReplaceAttr function that writes a time.Duration
// attribute as a Go duration string ("276ms") instead of the JSON handler's
// integer nanoseconds: the rule for every duration in the logs of NAS, the
// relay and the agent (a key ending in a unit, such as lag_ms, carries a
// number in that unit instead).
func DurationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// NewJSON returns a JSON logger on w at level, writing durations as text.
func NewJSON(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: DurationText}))
}
