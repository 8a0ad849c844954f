package notify

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// Event names what happened to a run (or a streak of runs).
type Event string

// Events a target can subscribe to.
const (
	EventSucceeded   Event = "succeeded"
	EventFailed      Event = "failed"
	EventMissed      Event = "missed"
	EventInterrupted Event = "interrupted"
	EventRecovered   Event = "recovered"
	// EventPartial is a fanout parent that ended partial: some children
	// failed, no more than its partial_tolerance allows. The run is a
	// success (it also emits EventSucceeded), but failed items need a look.
	EventPartial Event = "partial"
)

// Events lists every event in a fixed order.
var Events = []Event{EventSucceeded, EventFailed, EventMissed, EventInterrupted, EventRecovered, EventPartial}

// DefaultOn is the filter of a target that names none: everything that
// needs attention, not routine success.
var DefaultOn = []Event{EventFailed, EventMissed, EventInterrupted, EventRecovered, EventPartial}

// Valid reports whether e is a known event.
func (e Event) Valid() bool { return slices.Contains(Events, e) }

// Kind is how a target is reached.
type Kind string

// Target kinds.
const (
	KindWebhook Kind = "webhook"
	KindCommand Kind = "command"
	KindFile    Kind = "file"
)

// Target is one destination of a job's notifications.
type Target struct {
	// Kind is webhook, command or file.
	Kind Kind `json:"kind" yaml:"kind"`
	// URL is the webhook's absolute http(s) URL.
	URL string `json:"url,omitempty" yaml:"url,omitempty"`
	// Command is the argv of a command target (no shell).
	Command []string `json:"command,omitempty" yaml:"command,omitempty"`
	// Path is the absolute path a file target appends to.
	Path string `json:"path,omitempty" yaml:"path,omitempty"`
	// On filters the events sent to this target; empty means DefaultOn.
	On []Event `json:"on,omitempty" yaml:"on,omitempty"`
}

// Wants reports whether the target subscribes to e.
func (t Target) Wants(e Event) bool {
	if len(t.On) == 0 {
		return slices.Contains(DefaultOn, e)
	}
	return slices.Contains(t.On, e)
}

// Where returns the target's destination as text (URL, argv or path).
func (t Target) Where() string {
	switch t.Kind {
	case KindWebhook:
		return t.URL
	case KindCommand:
		return strings.Join(t.Command, " ")
	default:
		return t.Path
	}
}

// Policy is the notification part of a job: its targets and when a failing
// streak alerts. The field names are those of jobs.json.
type Policy struct {
	// Targets are the job's notification targets.
	Targets []Target `json:"notify,omitempty" yaml:"notify,omitempty"`
	// NotifyAfter is the number of consecutive failures that raise the
	// failed alert (0 means DefaultNotifyAfter).
	NotifyAfter int `json:"notify_after,omitempty" yaml:"notify_after,omitempty"`
	// RenotifyEvery sends a reminder every this many further failures of
	// an alerted streak (0: no reminders).
	RenotifyEvery int `json:"renotify_every,omitempty" yaml:"renotify_every,omitempty"`
}

// DefaultNotifyAfter is the notify_after of a job that sets none.
const DefaultNotifyAfter = 1

// maxTargets bounds the targets of one job.
const maxTargets = 16

// Threshold returns the effective notify_after.
func (p Policy) Threshold() int {
	if p.NotifyAfter <= 0 {
		return DefaultNotifyAfter
	}
	return p.NotifyAfter
}

// ErrAddressNotAllowed is returned (wrapped) when a webhook URL names or
// resolves to an address the AddressPolicy refuses.
var ErrAddressNotAllowed = errors.New("notify: webhook address not allowed")

// ErrInvalidTarget is returned (wrapped) for a target or policy that does
// not validate.
var ErrInvalidTarget = errors.New("notify: invalid target")

// ValidateOptions tunes ValidateTarget.
type ValidateOptions struct {
	// Addresses is the policy webhook URLs are checked against.
	Addresses AddressPolicy
	// Resolver, when set (net.DefaultResolver), resolves a webhook's host
	// name, for at most ResolveTimeout, and refuses it if any address is
	// refused. A name that does not resolve now is accepted (DNS may be
	// down while a job is added): the check at connection time still
	// applies, and Unresolved is told.
	Resolver Resolver
	// Unresolved, when set, is called for each webhook host name the
	// Resolver could not resolve, so the caller can warn about it.
	Unresolved func(host string, err error)
}

// Resolver looks up a host's addresses; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Validate checks the policy and each of its targets.
func (p Policy) Validate(ctx context.Context, opts ValidateOptions) error {
	if p.NotifyAfter < 0 {
		return fmt.Errorf("%w: notify_after must not be negative", ErrInvalidTarget)
	}
	if p.RenotifyEvery < 0 {
		return fmt.Errorf("%w: renotify_every must not be negative", ErrInvalidTarget)
	}
	if len(p.Targets) > maxTargets {
		return fmt.Errorf("%w: at most %d notify targets", ErrInvalidTarget, maxTargets)
	}
	for i, t := range p.Targets {
		if err := ValidateTarget(ctx, t, opts); err != nil {
			return fmt.Errorf("notify[%d]: %w", i, err)
		}
	}
	return nil
}

// ValidateTarget checks one target: its kind, its destination, and its
// event filter. A webhook URL whose host is a refused literal address or
// localhost (or, with a Resolver, resolves to one) fails with
// ErrAddressNotAllowed.
func ValidateTarget(ctx context.Context, t Target, opts ValidateOptions) error {
	if err := validateOn(t.On); err != nil {
		return err
	}
	switch t.Kind {
	case KindWebhook:
		if t.Command != nil || t.Path != "" {
			return fmt.Errorf("%w: a webhook target takes only url", ErrInvalidTarget)
		}
		return validateURL(ctx, t.URL, opts)
	case KindCommand:
		if t.URL != "" || t.Path != "" {
			return fmt.Errorf("%w: a command target takes only command", ErrInvalidTarget)
		}
		return validateCommand(t.Command)
	case KindFile:
		if t.URL != "" || t.Command != nil {
			return fmt.Errorf("%w: a file target takes only path", ErrInvalidTarget)
		}
		return validatePath(t.Path)
	case "":
		return fmt.Errorf("%w: kind is required (webhook, command or file)", ErrInvalidTarget)
	default:
		return fmt.Errorf("%w: unknown kind %q (want webhook, command or file)", ErrInvalidTarget, t.Kind)
	}
}

func validateOn(on []Event) error {
	seen := map[Event]bool{}
	for _, e := range on {
		if !e.Valid() {
			return fmt.Errorf("%w: unknown event %q in on (want one of succeeded, failed, missed, interrupted, recovered, partial)", ErrInvalidTarget, e)
		}
		if seen[e] {
			return fmt.Errorf("%w: event %q appears twice in on", ErrInvalidTarget, e)
		}
		seen[e] = true
	}
	return nil
}

func validateCommand(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("%w: command needs a program (argv[0])", ErrInvalidTarget)
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: command arguments must not contain NUL", ErrInvalidTarget)
		}
	}
	return nil
}

func validatePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: file target needs a path", ErrInvalidTarget)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%w: path must not contain NUL", ErrInvalidTarget)
	case !filepath.IsAbs(p):
		return fmt.Errorf("%w: path %q must be absolute", ErrInvalidTarget, p)
	case strings.HasSuffix(p, "/") || filepath.Clean(p) == "/":
		return fmt.Errorf("%w: path %q names a directory", ErrInvalidTarget, p)
	}
	return nil
}

func validateURL(ctx context.Context, raw string, opts ValidateOptions) error {
	if raw == "" {
		return fmt.Errorf("%w: webhook needs a url", ErrInvalidTarget)
	}
	if len(raw) > 2048 {
		return fmt.Errorf("%w: url is longer than 2048 characters", ErrInvalidTarget)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%w: url %q does not parse", ErrInvalidTarget, raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: url must be an absolute http or https URL", ErrInvalidTarget)
	case u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%w: url has no host", ErrInvalidTarget)
	case u.User != nil:
		return fmt.Errorf("%w: url must not carry user info (credentials go in the receiver's secret)", ErrInvalidTarget)
	case u.Fragment != "":
		return fmt.Errorf("%w: url must not contain a fragment", ErrInvalidTarget)
	}
	return opts.Addresses.CheckHost(ctx, u.Hostname(), opts.Resolver, opts.Unresolved)
}

// Clone returns a copy of t that shares no slice with it.
func (t Target) Clone() Target {
	t.Command = slices.Clone(t.Command)
	t.On = slices.Clone(t.On)
	return t
}

// Clone returns a copy of p that shares no slice with it.
func (p Policy) Clone() Policy {
	p.Targets = slices.Clone(p.Targets)
	for i := range p.Targets {
		p.Targets[i] = p.Targets[i].Clone()
	}
	return p
}

// Clone returns a copy of n that shares no memory with it.
func (n Notification) Clone() Notification {
	n.Target = n.Target.Clone()
	if n.Body.ExitCode != nil {
		code := *n.Body.ExitCode
		n.Body.ExitCode = &code
	}
	n.Body.Fanout = n.Body.Fanout.Clone()
	return n
}
