// Package systemd tells the service manager how a Chronos process is doing:
// ready to serve (Type=notify), stopping, and still alive (the watchdog). It
// speaks the sd_notify protocol through go-systemd's daemon package. Outside
// systemd (no NOTIFY_SOCKET in the environment) every call does nothing, so
// the binary calls it unconditionally.
package systemd

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Ready tells the service manager that the process serves (READY=1). When the
// unit sets WatchdogSec, Ready then keeps the watchdog fed (WATCHDOG=1 at half
// its interval) until ctx ends. alive, when not nil, is asked before each
// keep-alive: while it returns an error the process stops feeding the
// watchdog, so a process that is up but wedged is restarted by the service
// manager instead of kept. Ready returns once READY=1 is sent; the keep-alive
// runs in its own goroutine.
func Ready(ctx context.Context, log *slog.Logger, alive func(context.Context) error) {
	if _, err := daemon.SdNotify(false, daemon.SdNotifyReady); err != nil {
		log.Warn("could not tell the service manager the process is ready", "err", err)
	}
	every, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("the watchdog settings in the environment are not valid", "err", err)
		return
	}
	if every <= 0 {
		return
	}
	go keepAlive(ctx, log, every/2, alive)
}

// keepAlive sends WATCHDOG=1 every interval while alive says so.
func keepAlive(ctx context.Context, log *slog.Logger, interval time.Duration, alive func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		feed(ctx, log, alive)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// feed sends one WATCHDOG=1 unless alive reports a fault.
func feed(ctx context.Context, log *slog.Logger, alive func(context.Context) error) {
	if alive != nil {
		if err := alive(ctx); err != nil {
			log.Error("not feeding the watchdog: the process is not healthy", "err", err)
			return
		}
	}
	if _, err := daemon.SdNotify(false, daemon.SdNotifyWatchdog); err != nil {
		log.Warn("could not feed the watchdog", "err", err)
	}
}

// Stopping tells the service manager that the process is shutting down
// (STOPPING=1), so a stop in progress is not taken for a crash.
func Stopping(log *slog.Logger) {
	if _, err := daemon.SdNotify(false, daemon.SdNotifyStopping); err != nil {
		log.Warn("could not tell the service manager the process is stopping", "err", err)
	}
}
