package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chronoscron/chronos/relay"
)

// DefaultSchema is the schema the engine's tables live in unless the URL's
// schema= option or Options.Schema names another.
const DefaultSchema = "chronos"

// Options configure an Engine.
type Options struct {
	// Schema is the PostgreSQL schema (namespace) of the engine's tables;
	// default the URL's schema= option, else DefaultSchema. Processes that
	// share a store open the same schema.
	Schema string
	// Migrate runs the pending schema migrations at open (as `chronos nas
	// migrate` does). Without it, Open refuses a database whose schema is
	// not the one this binary writes.
	Migrate bool
	// MaxConns bounds the connection pool; default the URL's pool_max_conns,
	// else 16.
	MaxConns int32
	// Now, when set, replaces PostgreSQL's clock; it exists for tests that
	// step time by hand.
	Now func() time.Time
	// Logger receives the engine's logs; default slog.Default().
	Logger *slog.Logger
	// LostReportFor is how long a store found to have lost its data is
	// reported (see CheckEpoch). Default DefaultLostReportFor.
	LostReportFor time.Duration
	// EpochCheck is how often the engine checks by itself that the store
	// still holds its data. Default DefaultEpochCheck; negative turns the
	// background check off (CheckEpoch still checks).
	EpochCheck time.Duration
}

// Engine is the PostgreSQL relay.Engine. It is safe for concurrent use by any
// number of goroutines and processes.
//
// Its methods come from the parts it is made of, one per responsibility, all
// on the one connection pool (core).
type Engine struct {
	*core            // the pool, the clock, wake-ups, Close
	*queue           // armed rows, claims and leases: relay.Armed, relay.Queue (arm.go, claim.go, lease.go)
	*flows           // flow control: relay.Flows (flow.go)
	*deadLetters     // relay.DeadLetters and the failed-fire feed (dead.go, failed.go)
	*records         // last fires and instances: relay.LastFires, relay.Instances (lastfire.go, instance.go)
	*control         // relay.Control, relay.Census, relay.DeliveryLookup (control.go, census.go, delivery.go)
	*deliveryHistory // relay.History (history.go)
	*sessions        // nas.SessionRevoker: operator logouts (sessions.go)
}

var _ relay.Engine = (*Engine)(nil)

// core is what the parts share: the pool and the clock.
type core struct {
	pool   db // each statement bounded by its context's relay.CallTimeout
	schema string
	opts   Options
	log    *slog.Logger
	wake   relay.Broadcast
	stop   context.CancelFunc
	done   chan struct{}
	epoch  *epochState
}

// schemaName is what a schema name may be: a plain lower-case identifier,
// so that it needs no quoting anywhere.
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to the PostgreSQL that rawURL (postgres:// or
// postgresql://, any libpq connection option in the query) names and
// returns an engine on its schema. The query may also carry the engine's own
// schema= option, which is not passed to the server.
func Open(ctx context.Context, rawURL string, opts Options) (*Engine, error) {
	connString, schema, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opts.Schema == "" {
		opts.Schema = schema
	}
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if !schemaName.MatchString(opts.Schema) {
		return nil, fmt.Errorf("postgres: schema %q: want lower-case letters, digits and _", opts.Schema)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	} else if !hasParam(rawURL, "pool_max_conns") {
		cfg.MaxConns = 16
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = opts.Schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "chronos"
	// The queue's statements are short and its tables churn: a JIT
	// compilation (tens of milliseconds) costs more than any statement it
	// would speed up, and a plan made on a cold table overestimates.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	c := &core{pool: db{pool}, schema: opts.Schema, opts: opts, log: opts.Logger, done: make(chan struct{}),
		epoch: newEpochState(opts.LostReportFor, opts.EpochCheck)}
	if opts.Migrate {
		if _, err := c.migrate(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	} else if err := c.checkVersion(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	e := &Engine{
		core:            c,
		queue:           &queue{core: c},
		flows:           &flows{c},
		deadLetters:     &deadLetters{c},
		records:         &records{c},
		control:         &control{c},
		deliveryHistory: &deliveryHistory{c},
		sessions:        &sessions{c},
	}
	lctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.listen(lctx)
	// Adopt the store's epoch marker (writing one into an empty store), so
	// that a loss from now on is noticed, and keep checking it.
	if _, err := e.CheckEpoch(ctx); err != nil {
		_ = e.Close()
		return nil, err
	}
	go e.control.watchEpoch()
	return e, nil
}

// parseURL splits the engine's own options off a store URL.
func parseURL(rawURL string) (connString, schema string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("postgres: store URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", "", fmt.Errorf("postgres: store URL scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
	q := u.Query()
	schema = q.Get("schema")
	q.Del("schema")
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// hasParam reports whether rawURL's query sets name.
func hasParam(rawURL, name string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has(name)
}

// Schema returns the schema the engine's tables live in.
func (c *core) Schema() string { return c.schema }

// Close stops the engine's listener and closes its pool.
func (c *core) Close() error {
	if c.stop != nil {
		c.stop()
		<-c.done
	}
	c.pool.Close()
	return nil
}

// now is the clock argument every statement passes to chronos_now_ms: nil
// (PostgreSQL's clock) unless Options.Now replaces it.
func (c *core) now() any {
	if c.opts.Now == nil {
		return nil
	}
	return c.opts.Now().UnixMilli()
}

// fail wraps err with what failed; an error of the connection rather than of
// the statement also wraps relay.ErrUnavailable, so that NAS answers 503
// store_unavailable.
func fail(what string, err error) error {
	if err == nil {
		return nil
	}
	if unavailable(err) {
		return fmt.Errorf("postgres: %s: %w: %w", what, relay.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// unavailable reports whether err says the server could not be reached or
// stopped answering, rather than that it refused a statement.
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, net.ErrClosed) {
		return true
	}
	// A connection the server closed under a statement (a crash, an
	// immediate shutdown) ends the reply early.
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		// Class 08: connection exception; 57P01-57P03: admin shutdown,
		// crash shutdown, cannot connect now; 53300: too many connections.
		switch {
		case len(pe.Code) == 5 && pe.Code[:2] == "08":
			return true
		case pe.Code == "57P01", pe.Code == "57P02", pe.Code == "57P03", pe.Code == "53300":
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, pgx.ErrTxClosed)
}

// fromMs returns Unix milliseconds as a time in UTC.
func fromMs(v int64) time.Time { return time.UnixMilli(v).UTC() }

// fromNs returns Unix nanoseconds as a time in UTC; 0 is the zero time.
func fromNs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

// nsOf returns t in Unix nanoseconds; the zero time is 0.
func nsOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// isUndefinedTable reports whether err is PostgreSQL's "relation does not
// exist".
func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
