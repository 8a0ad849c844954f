//go:build unix

package provider

import (
	"context"
	"fmt"

	"github.com/chronoscron/chronos/internal/filelock"
)

// lockFile takes an exclusive flock on path, waiting until ctx ends, and
// returns the function that releases it. Several processes sharing a home
// (the agent and the jobs CLI) reconcile one at a time.
func lockFile(ctx context.Context, path string) (func(), error) {
	unlock, err := filelock.LockPath(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("provider: lock: %w", err)
	}
	return unlock, nil
}
