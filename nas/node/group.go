package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/chronoscron/chronos/internal/systemd"
)

// group runs the parts of a long-running process and stops them together:
// when ctx ends or one part reports, every part is cancelled and awaited.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	log    *slog.Logger
	name   string // prefixes the log messages
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	report chan struct{} // closed by the first part to report
	once   sync.Once
}

func newGroup(ctx context.Context, cancel context.CancelFunc, log *slog.Logger, name string) *group {
	return &group{ctx: ctx, cancel: cancel, log: log, name: name, report: make(chan struct{})}
}

// goErr runs part; its return ends the group. A part that ends with
// context.Canceled has only been told to stop.
func (g *group) goErr(part func() error) {
	g.wg.Go(func() {
		err := part()
		g.mu.Lock()
		g.errs = append(g.errs, err)
		g.mu.Unlock()
		g.once.Do(func() { close(g.report) })
	})
}

// goDone runs part, which ends only when the group stops.
func (g *group) goDone(part func()) { g.wg.Go(part) }

// wait blocks until ctx ends or a part reports, then cancels the rest,
// waits for every part and returns the first failure.
func (g *group) wait() error {
	select {
	case <-g.ctx.Done():
	case <-g.report:
	}
	g.mu.Lock()
	var first error
	if len(g.errs) > 0 && g.errs[0] != nil && !errors.Is(g.errs[0], context.Canceled) {
		first = g.errs[0]
		g.log.Error(g.name+" stopping", "error", first.Error())
	}
	g.mu.Unlock()
	systemd.Stopping(g.log)
	g.cancel()
	g.wg.Wait()
	for _, err := range g.errs {
		if first == nil && err != nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	g.log.Info(g.name + " stopped")
	return first
}
