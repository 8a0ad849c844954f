package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// lineSink collects JSON log lines and hands over the first one whose msg
// is want.
type lineSink struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	got  chan map[string]any
}

func (s *lineSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	var rec map[string]any
	if json.Unmarshal(p, &rec) == nil && rec["msg"] == s.want {
		select {
		case s.got <- rec:
		default:
		}
	}
	return len(p), nil
}

// TestRetryLogsDurationText: a fire that will be retried is logged with
// retry_in as a Go duration string ("276ms"), not integer nanoseconds.
func TestRetryLogsDurationText(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	engine := memory.New(memory.Options{})
	defer engine.Close()
	sink := &lineSink{want: "relay: fire will be retried", got: make(chan map[string]any, 1)}
	d := relay.NewDispatcher(engine, relay.DelivererFunc(func(context.Context, relay.Lease) relay.Outcome {
		return relay.Outcome{Kind: relay.Retry, Reason: "agent busy"}
	}), relay.DispatcherConfig{
		Logger: slog.New(slog.NewJSONHandler(sink, nil)),
		Retry:  relay.RetryPolicy{Base: 276 * time.Millisecond, MaxDelay: time.Second, NoColdStart: true},
	})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	if _, err := engine.Arm(ctx, relay.ArmRequest{AgentID: "agent-1", JobID: "job-1", ScheduleID: "sch-1", FireAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	select {
	case rec := <-sink.got:
		if got, ok := rec["retry_in"].(string); !ok || got != "276ms" {
			t.Fatalf("retry_in = %#v, want the string \"276ms\": %v", rec["retry_in"], rec)
		}
	case <-time.After(10 * time.Second):
		sink.mu.Lock()
		defer sink.mu.Unlock()
		t.Fatalf("no retry logged:\n%s", strings.TrimSpace(sink.buf.String()))
	}
}
