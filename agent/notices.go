package agent

import (
	"context"

	"github.com/chronoscron/chronos/agent/notify"
)

// Outbox returns the home's notification outbox (for listing and
// replay), opening it if that has not been possible yet.
func (rt *Runtime) Outbox() (*notify.FileOutbox, error) {
	box, _, err := rt.notices.Outbox()
	return box, err
}

// RunNotifier drains the home's outbox until ctx ends or the runtime
// closes: it hands over notifications still waiting in jobs.json, resumes
// whatever an earlier process left open, and sends each notification as it
// becomes owed, retrying with backoff. A Runtime runs one notifier: a call
// made while another runs returns nil at once. RunTimer calls it; a serving
// agent with another provider calls it itself.
func (rt *Runtime) RunNotifier(ctx context.Context) error { return rt.notices.Run(ctx) }
