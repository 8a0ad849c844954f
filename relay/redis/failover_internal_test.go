package redis

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestFaultLogCollapsesRepeats(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var f faultLog
	ctx := context.Background()
	refused := errors.New("dial tcp 127.0.0.1:7001: connect: connection refused")
	for range 100 {
		f.warn(ctx, log, "redis call failed, retrying", refused)
	}
	f.warn(ctx, log, "redis call failed, retrying", errors.New("LOADING"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want one per distinct failure:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "connection refused") || !strings.Contains(lines[1], "LOADING") {
		t.Errorf("lines:\n%s", buf.String())
	}
	f.mu.Lock()
	n := f.seen["redis call failed, retrying\x00"+refused.Error()].n
	f.mu.Unlock()
	if n != 99 {
		t.Errorf("counted %d repeats, want 99", n)
	}
}
