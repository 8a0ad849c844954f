package memory_test

import (
	"testing"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
	"github.com/chronoscron/chronos/relay/relaytest"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	relaytest.RunHistorySuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			e := memory.New(memory.Options{})
			t.Cleanup(func() { _ = e.Close() })
			return e
		},
	})
}
