package nashttp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: servers,
// dispatchers, key refreshers and agent callers must all stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
