package node

import (
	"context"
	"log/slog"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/recorder"
)

// recordHistory wraps the dispatchers' deliverer so that their deliveries
// are counted in the store's history (relay.History), and runs the
// recorder in g; with no dispatcher, or on an engine without history, it
// returns d as it is.
func recordHistory(ctx context.Context, g *group, engine relay.Engine, d relay.Deliverer, kind string, dispatchers int, log *slog.Logger) relay.Deliverer {
	h, ok := engine.(relay.History)
	if !ok || dispatchers <= 0 {
		return d
	}
	rec := recorder.New(h, recorder.Options{Kind: kind, Dispatchers: dispatchers, Logger: log})
	g.goDone(func() { rec.Run(ctx) })
	return rec.Wrap(d)
}
