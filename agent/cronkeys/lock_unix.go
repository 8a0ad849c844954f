//go:build unix

package cronkeys

import (
	"context"
	"fmt"

	"github.com/chronoscron/chronos/internal/filelock"
)

// lockFile takes an exclusive flock on path, waiting until ctx ends, and
// returns the function that releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	unlock, err := filelock.LockPath(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("cronkeys: lock: %w", err)
	}
	return unlock, nil
}
