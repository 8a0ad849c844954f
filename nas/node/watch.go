package node

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chronoscron/chronos/internal/secretfile"
	"github.com/chronoscron/chronos/nas"
)

// watchKeys re-reads the signing keys dir on SIGHUP and every interval.
func watchKeys(ctx context.Context, keys *nas.KeyRing, every time.Duration, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-tick:
		}
		changed, err := keys.Reload()
		switch {
		case err != nil:
			log.Error("signing keys not reloaded; the previous keys stay in use", "error", err.Error())
		case changed:
			set := keys.Current()
			kids := make([]string, 0, len(set.Published))
			for _, k := range set.Published {
				kids = append(kids, k.KID)
			}
			log.Info("signing keys reloaded", "kid", set.Active.KID, "published", kids)
			secretfile.Warn(log, set.Exposed...)
		}
	}
}
