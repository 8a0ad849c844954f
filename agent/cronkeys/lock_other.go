//go:build !unix

package cronkeys

import "context"

// lockFile is a no-op where flock is not available; writers within one
// process are still serialised by the Store's mutex.
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }
