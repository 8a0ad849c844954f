package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/pgtest"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/postgres"
	"github.com/chronoscron/chronos/relay/relaytest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// schemas counts the schemas this test binary made.
var schemas atomic.Int64

// freshSchema returns a schema name no other engine of any test binary on
// the same server uses.
func freshSchema() string {
	return fmt.Sprintf("t%d_%d", os.Getpid(), schemas.Add(1))
}

// newEngine returns an engine on the shared test PostgreSQL in a fresh
// schema (opts.Schema, when set, names an existing one: a peer's).
func newEngine(t *testing.T, opts postgres.Options) *postgres.Engine {
	t.Helper()
	if opts.Schema == "" {
		opts.Schema = freshSchema()
	}
	opts.Migrate = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := postgres.Open(ctx, pgtest.URL(t), opts)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	t.Parallel()
	relaytest.RunEngineSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, postgres.Options{})
		},
		NewWithClock: func(t *testing.T, c *relaytest.Clock) relay.Engine {
			return newEngine(t, postgres.Options{Now: c.Now})
		},
	})
}

func TestCensus(t *testing.T) {
	t.Parallel()
	relaytest.RunCensusSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, postgres.Options{})
		},
	})
}

func TestDispatcher(t *testing.T) {
	t.Parallel()
	relaytest.RunDispatcherSuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, postgres.Options{})
		},
		Peer: func(t *testing.T, e relay.Engine) relay.Engine {
			return newEngine(t, postgres.Options{Schema: e.(*postgres.Engine).Schema()})
		},
	})
}

func TestHistory(t *testing.T) {
	t.Parallel()
	relaytest.RunHistorySuite(t, relaytest.Factory{
		New: func(t *testing.T) relay.Engine {
			return newEngine(t, postgres.Options{})
		},
	})
}
