//go:build !unix

package provider

import "context"

// lockFile is a no-op where flock is not available; reconciles within one
// process are still serialised by the Reconciler's mutex.
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }
