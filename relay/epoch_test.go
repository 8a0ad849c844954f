package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// epochEngine is an engine whose store answers as told and can lose its
// data.
type epochEngine struct {
	relay.Engine
	statsErr error
	status   relay.EpochStatus
	epochErr error
}

func (e epochEngine) Stats(ctx context.Context) (relay.Stats, error) {
	if e.statsErr != nil {
		return relay.Stats{}, e.statsErr
	}
	return e.Engine.Stats(ctx)
}

func (e epochEngine) CheckEpoch(context.Context) (relay.EpochStatus, error) {
	return e.status, e.epochErr
}

// TestCheckStore pins the store's readiness checks: store fails while the
// store does not answer; store_epoch exists only on an engine that can
// lose its data and fails while a loss is reported or cannot be checked.
func TestCheckStore(t *testing.T) {
	t.Parallel()
	mem := memory.New(memory.Options{})
	t.Cleanup(func() { _ = mem.Close() })
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lost := relay.EpochStatus{Lost: true, Since: since, Until: since.Add(5 * time.Minute), Reason: "the marker was gone"}
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name   string
		engine relay.Engine
		store  string // "" for passing, else a part of the error
		epoch  string // "-" for no check, "" for passing, else a part of the error
	}{
		{"embedded engine", mem, "", "-"},
		{"healthy", epochEngine{Engine: mem}, "", ""},
		{"store down", epochEngine{Engine: mem, statsErr: down}, "connection refused", "the store did not answer"},
		{"lost", epochEngine{Engine: mem, status: lost}, "", "lost its data at 2026-03-01T12:00:00Z (the marker was gone); armed fires may be gone until agents arm them again; reported until 2026-03-01T12:05:00Z"},
		{"epoch unknown", epochEngine{Engine: mem, epochErr: down}, "", "not checked: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checks := relay.CheckStore(context.Background(), tc.engine)
			expect := func(name, want string) {
				t.Helper()
				err, ok := checks[name]
				switch {
				case want == "-":
					if ok {
						t.Errorf("%s checked (%v), want no such check", name, err)
					}
				case !ok:
					t.Errorf("%s missing from %v", name, checks)
				case want == "" && err != nil:
					t.Errorf("%s: %v, want passing", name, err)
				case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
					t.Errorf("%s: %v, want an error containing %q", name, err, want)
				}
			}
			expect("store", tc.store)
			expect("store_epoch", tc.epoch)
			if len(checks) > 2 {
				t.Errorf("checks %v, want only store and store_epoch", checks)
			}
		})
	}
}
