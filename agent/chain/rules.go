package chain

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Errors of the rules. A refusal wraps exactly one of them.
var (
	// ErrDuplicate: a chain with that id exists, or an open step has the
	// same de-duplication key.
	ErrDuplicate = errors.New("duplicate")
	// ErrLimit: a hard limit refused the spawn (see LimitError).
	ErrLimit = errors.New("limit")
	// ErrBreakerOpen: the class's circuit breaker is open.
	ErrBreakerOpen = errors.New("breaker open")
	// ErrClosed: the chain is closed or has expired.
	ErrClosed = errors.New("chain closed")
	// ErrNotFound: no chain with that id.
	ErrNotFound = errors.New("chain not found")
	// ErrInvalid: the spawn names no stage, a step that is not the
	// chain's, or a stage with nothing to retry.
	ErrInvalid = errors.New("invalid spawn")
	// ErrExpired: the chain's expires_at has passed; it wraps ErrClosed.
	ErrExpired = fmt.Errorf("%w: expired", ErrClosed)
)

// Limit names.
const (
	LimitDepth      = "max_depth"
	LimitChildren   = "max_children"
	LimitRetries    = "max_retries"
	LimitConcurrent = "max_concurrent"
	LimitSpawnStorm = "spawn_storm"
)

// LimitError is a refusal by a hard limit; it wraps ErrLimit.
type LimitError struct {
	// Limit names the limit (LimitDepth, ...).
	Limit string
	// Detail says what was asked against what is allowed.
	Detail string
}

// Error says which limit refused and why.
func (e *LimitError) Error() string { return fmt.Sprintf("limit %s: %s", e.Limit, e.Detail) }

// Unwrap returns ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// Policy is a class's rules: the limits of its chains and its breaker.
type Policy struct {
	Limits Limits
	// BreakerFailures consecutive chain failures within BreakerWindow open
	// the breaker, for BreakerCooldown.
	BreakerFailures int
	BreakerWindow   time.Duration
	BreakerCooldown time.Duration
	// SpawnStorm is the most steps the class may spawn in one minute.
	SpawnStorm int
}

// DefaultPolicy returns the default policy.
func DefaultPolicy() Policy {
	return Policy{Limits: DefaultLimits(), BreakerFailures: DefaultBreakerFailures, BreakerWindow: DefaultBreakerWindow,
		BreakerCooldown: DefaultBreakerCooldown, SpawnStorm: DefaultSpawnStorm}
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,48}$`)

// ValidName checks a class or stage name: letters, digits, '_' and '-',
// at most 48 (no dots, which separate the parts of a step's job id).
func ValidName(what, s string) error {
	if !namePattern.MatchString(s) {
		return fmt.Errorf("%s %q must be 1-48 letters, digits, '_' or '-'", what, s)
	}
	return nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidID checks a chain id: letters, digits, '_' and '-', at most 64.
func ValidID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("chain id %q must be 1-64 letters, digits, '_' or '-'", id)
	}
	return nil
}

// Validate checks limits.
func (l Limits) Validate() error {
	switch {
	case l.MaxDepth < 1 || l.MaxDepth > 64:
		return fmt.Errorf("max_depth %d must be within 1..64", l.MaxDepth)
	case l.MaxChildren < 1 || l.MaxChildren > 1000:
		return fmt.Errorf("max_children %d must be within 1..1000", l.MaxChildren)
	case l.MaxRetries < 0 || l.MaxRetries > 100:
		return fmt.Errorf("max_retries %d must be within 0..100", l.MaxRetries)
	case l.Lifetime.Std() < time.Second || l.Lifetime.Std() > 7*24*time.Hour:
		return fmt.Errorf("lifetime %s must be within 1s..168h", l.Lifetime.Std())
	case l.MaxConcurrent < 1 || l.MaxConcurrent > 1000:
		return fmt.Errorf("max_concurrent %d must be within 1..1000", l.MaxConcurrent)
	}
	return nil
}

// Validate checks a policy.
func (p Policy) Validate() error {
	if err := p.Limits.Validate(); err != nil {
		return err
	}
	switch {
	case p.BreakerFailures < 1:
		return fmt.Errorf("breaker_failures %d must be at least 1", p.BreakerFailures)
	case p.BreakerWindow < time.Second:
		return fmt.Errorf("breaker_window %s must be at least 1s", p.BreakerWindow)
	case p.BreakerCooldown < time.Second:
		return fmt.Errorf("breaker_cooldown %s must be at least 1s", p.BreakerCooldown)
	case p.SpawnStorm < 1:
		return fmt.Errorf("spawn_storm %d must be at least 1", p.SpawnStorm)
	}
	return nil
}

// StepJobID returns the job id of a step: <chain_id>.<stage>.<depth>.<attempt>.
func StepJobID(chainID, stage string, depth, attempt int) string {
	return fmt.Sprintf("%s.%s.%d.%d", chainID, stage, depth, attempt)
}

// DefaultID returns the id of a chain of class started at now when none is
// given: {class}-{YYYYMMDD}-{slot}, where slot is the index of the
// lifetime-long window of the day (in loc) that now falls in. Two starts
// for one incident within a window get one id, so the second is refused as
// a duplicate; a scout should still pass a stable id per incident.
func DefaultID(class string, now time.Time, loc *time.Location, lifetime time.Duration) string {
	t := now.In(loc)
	midnight := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, loc)
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}
	slot := int(t.Sub(midnight) / lifetime)
	return fmt.Sprintf("%s-%s-%02d", class, t.Format("20060102"), slot)
}

// Exit codes of the chain commands for each refusal.
const (
	ExitDuplicate   = 3
	ExitLimit       = 4
	ExitBreakerOpen = 5
	ExitClosed      = 6
)

// ExitHelp documents the chain commands' exit codes.
const ExitHelp = `Exit codes: 0 ok, 1 failure, 2 usage, 3 duplicate, 4 limit (the chain is
closed), 5 breaker open, 6 chain closed or expired. Inside a run the chain and
the spawning step come from $CHRONOS_CHAIN_ID and $CHRONOS_CHAIN_STEP.`

// ExitCode returns the exit code of a refusal, or 0 for any other error.
func ExitCode(err error) int {
	switch {
	case errors.Is(err, ErrDuplicate):
		return ExitDuplicate
	case errors.Is(err, ErrLimit):
		return ExitLimit
	case errors.Is(err, ErrBreakerOpen):
		return ExitBreakerOpen
	case errors.Is(err, ErrClosed):
		return ExitClosed
	}
	return 0
}
