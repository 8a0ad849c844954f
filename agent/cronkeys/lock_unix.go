//go:build unix

package cronkeys

import (
	"context"
	"fmt"
	"os"

	"github.com/chronoscron/chronos/internal/filelock"
)

// lockFile takes an exclusive flock on path, waiting until ctx ends, and
// returns the function that releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cronkeys: lock: %w", err)
	}
	if err := filelock.Acquire(ctx, f, filelock.Exclusive, 0); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cronkeys: lock: %w", err)
	}
	return func() {
		filelock.Release(f)
		_ = f.Close()
	}, nil
}
