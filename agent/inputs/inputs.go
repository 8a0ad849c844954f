package inputs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/notify"
)

// Limits of every resolver.
const (
	// MaxBytes caps what a resolver reads (a file, a response body, an
	// output file).
	MaxBytes = 1 << 20
	// MaxItems caps the number of items.
	MaxItems = 100_000
	// FetchTimeout bounds an http(s) fetch or a SQL query.
	FetchTimeout = 10 * time.Second
)

// ErrInvalid wraps every error about an inputs_from address itself (as
// opposed to a failure to read what it names).
var ErrInvalid = errors.New("invalid inputs_from")

// Resolver turns one scheme's address into items.
type Resolver interface {
	// Check validates u without reading anything (at jobs add).
	Check(ctx context.Context, u *url.URL) error
	// Resolve reads the items u names.
	Resolve(ctx context.Context, u *url.URL) ([]string, error)
}

// Options are what the resolvers are built from.
type Options struct {
	// Addresses is the policy http(s) inputs are checked against.
	Addresses notify.AddressPolicy
	// Jobs finds the output of a job's latest successful run (job://).
	Jobs JobOutputs
	// SQL names the databases sql:// inputs may query.
	SQL map[string]DSN
	// Timeout overrides FetchTimeout (tests).
	Timeout time.Duration
	// Now is the clock job:// windows are judged by (default time.Now).
	Now func() time.Time
}

// Set is the resolvers of an agent, by scheme.
type Set struct {
	byScheme map[string]Resolver
}

// New returns the resolvers configured by o.
func New(o Options) *Set {
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = FetchTimeout
	}
	h := &HTTPResolver{Addresses: o.Addresses, Timeout: timeout}
	return &Set{byScheme: map[string]Resolver{
		"file":  FileResolver{},
		"http":  h,
		"https": h,
		"job":   &JobResolver{Jobs: o.Jobs, Now: o.Now},
		"sql":   &SQLResolver{DSNs: o.SQL, Timeout: timeout},
	}}
}

func (s *Set) resolver(raw string) (Resolver, *url.URL, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, nil, fmt.Errorf("%w: empty", ErrInvalid)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %q does not parse: %w", ErrInvalid, raw, err)
	}
	r, ok := s.byScheme[strings.ToLower(u.Scheme)]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q: scheme must be file, http, https, job or sql", ErrInvalid, raw)
	}
	return r, u, nil
}

// Check validates raw without reading what it names.
func (s *Set) Check(ctx context.Context, raw string) error {
	r, u, err := s.resolver(raw)
	if err != nil {
		return err
	}
	return r.Check(ctx, u)
}

// Resolve returns the items raw names, in order.
func (s *Set) Resolve(ctx context.Context, raw string) ([]string, error) {
	r, u, err := s.resolver(raw)
	if err != nil {
		return nil, err
	}
	if err := r.Check(ctx, u); err != nil {
		return nil, err
	}
	items, err := r.Resolve(ctx, u)
	if err != nil {
		return nil, err
	}
	if len(items) > MaxItems {
		return nil, fmt.Errorf("inputs: %d items, more than %d", len(items), MaxItems)
	}
	return items, nil
}

// Lines splits text into items: one per line, trimmed, leaving out empty
// lines and lines starting with #.
func Lines(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), MaxBytes+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out
}
