package redis

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/redistest"
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

func TestShardEpochBehindIsReportedLost(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Open(ctx, srv.URL(), Options{Prefix: "ep", Shards: 4, EpochCheck: -1, LostReportFor: time.Minute,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for range 3 { // the background check raises every shard's sequence number
		if st, err := e.checkEpoch(ctx, true); err != nil || st.Lost {
			t.Fatalf("check: %+v, %v", st, err)
		}
	}
	// Shard 2's master "failed over" to a replica that missed the last
	// raise: its copy is one behind.
	c := redistest.ClientOf(t, srv.URL())
	if err := c.HSet(ctx, e.k.shardEpoch(2), "seq", e.shardSeq[2]-1).Err(); err != nil {
		t.Fatal(err)
	}
	st, err := e.CheckEpoch(ctx)
	if err != nil || !st.Lost || st.Reason != ReasonShardLost {
		t.Fatalf("after a shard's copy fell behind: %+v, %v; want lost, %q", st, err, ReasonShardLost)
	}
	// A readiness check only reads: it raises nothing.
	before := e.shardSeq[0]
	if _, err := e.CheckEpoch(ctx); err != nil || e.shardSeq[0] != before {
		t.Fatalf("a plain check raised shard 0 from %d to %d (%v)", before, e.shardSeq[0], err)
	}
}
