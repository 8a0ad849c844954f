package notify

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// HomeDir returns the directory of an agent home that holds the outbox and
// the webhook signing secret.
func HomeDir(home string) string { return filepath.Join(home, "notify") }

// SpecNone is the spec that stands for no target at all: given alone, it
// removes every target of a job.
const SpecNone = "none"

// specAll is the event filter that names every event.
const specAll = "all"

// filterSuffix matches an event filter after the last '@' of a spec.
var filterSuffix = regexp.MustCompile(`^[a-z]+(,[a-z]+)*$`)

// ParseTarget reads a target from its spec, KIND:DEST[@EVENTS]:
//
//	webhook:https://hooks.example.com/chronos
//	file:/var/log/chronos-events.jsonl@failed,recovered
//	command:/usr/local/bin/page-me --team 'night shift'@all
//
// KIND is webhook, command or file. DEST is the URL, the command line or
// the absolute path. A command line is split into words as a shell would
// (blanks separate words; 'single' and "double" quotes and backslashes
// keep them together) but nothing is expanded and no shell runs it.
// EVENTS, after the last '@', is a comma-separated list of events (or
// "all"); without it the target gets DefaultOn. An '@' that is followed by
// anything but lowercase letters and commas belongs to DEST; to keep a
// DEST that itself ends in "@word", give an explicit filter.
//
// ParseTarget checks the syntax and the target's shape (ValidateTarget
// without an address policy's opinion); whether a webhook's address may be
// reached is for Policy.Validate.
func ParseTarget(spec string) (Target, error) {
	s := strings.TrimSpace(spec)
	kind, dest, ok := strings.Cut(s, ":")
	if !ok || kind == "" {
		return Target{}, fmt.Errorf("%w: notify spec %q: want KIND:DESTINATION, like webhook:https://hooks.example.com/x, file:/var/log/events.jsonl or command:/usr/local/bin/page-me", ErrInvalidTarget, spec)
	}
	t := Target{Kind: Kind(strings.ToLower(strings.TrimSpace(kind)))}
	if i := strings.LastIndexByte(dest, '@'); i >= 0 && filterSuffix.MatchString(dest[i+1:]) {
		on, err := parseOn(dest[i+1:])
		if err != nil {
			return Target{}, fmt.Errorf("notify spec %q: %w", spec, err)
		}
		dest, t.On = dest[:i], on
	}
	dest = strings.TrimSpace(dest)
	switch t.Kind {
	case KindWebhook:
		t.URL = dest
	case KindFile:
		t.Path = dest
	case KindCommand:
		argv, err := SplitCommand(dest)
		if err != nil {
			return Target{}, fmt.Errorf("notify spec %q: %w", spec, err)
		}
		t.Command = argv
	default:
		return Target{}, fmt.Errorf("%w: notify spec %q: unknown kind %q (want webhook, command or file, as in webhook:https://…)", ErrInvalidTarget, spec, kind)
	}
	if err := validateShape(t); err != nil {
		return Target{}, fmt.Errorf("notify spec %q: %w", spec, err)
	}
	return t, nil
}

// validateShape checks t as ValidateTarget does, with every address
// allowed: the syntax, not the network.
func validateShape(t Target) error {
	return ValidateTarget(context.Background(), t, ValidateOptions{Addresses: AddressPolicy{Allow: allAddresses}})
}

// allAddresses allows every address: no resolver runs without one.
var allAddresses = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// parseOn reads an event filter: events separated by commas, or "all".
func parseOn(s string) ([]Event, error) {
	if s == specAll {
		return append([]Event(nil), Events...), nil
	}
	var on []Event
	for _, name := range strings.Split(s, ",") {
		on = append(on, Event(name))
	}
	return on, validateOn(on)
}

// Spec returns the spec ParseTarget reads back as t.
func (t Target) Spec() string {
	var dest string
	switch t.Kind {
	case KindCommand:
		dest = JoinCommand(t.Command)
	default:
		dest = t.Where()
	}
	s := string(t.Kind) + ":" + dest
	switch {
	case len(t.On) > 0:
		s += "@" + joinEvents(t.On)
	case filterSuffix.MatchString(dest[strings.LastIndexByte(dest, '@')+1:]) && strings.Contains(dest, "@"):
		// The end of dest would be read as a filter: name the default.
		s += "@" + joinEvents(DefaultOn)
	}
	return s
}

func joinEvents(on []Event) string {
	names := make([]string, len(on))
	for i, e := range on {
		names[i] = string(e)
	}
	return strings.Join(names, ",")
}

// SplitCommand splits a command line into words as a POSIX shell would,
// without expanding anything: blanks separate words, a backslash keeps the
// next character, 'single quotes' keep everything up to the next single
// quote, and "double quotes" keep everything up to the next unescaped
// double quote (inside them a backslash escapes only \, ", $ and `).
func SplitCommand(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
			continue
		case c == '\\':
			if i+1 == len(line) {
				return nil, fmt.Errorf("%w: command ends with a lone backslash", ErrInvalidTarget)
			}
			i++
			w.WriteByte(line[i])
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("%w: command has an unterminated single quote", ErrInvalidTarget)
			}
			w.WriteString(line[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			n, err := doubleQuoted(line[i+1:], &w)
			if err != nil {
				return nil, err
			}
			i += n + 1
		default:
			w.WriteByte(c)
		}
		inWord = true
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// doubleQuoted writes the text of a double-quoted string that s starts
// inside of, and returns the index of its closing quote in s.
func doubleQuoted(s string, w *strings.Builder) (int, error) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i, nil
		case c == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`", s[i+1]) >= 0:
			i++
			w.WriteByte(s[i])
		default:
			w.WriteByte(c)
		}
	}
	return 0, fmt.Errorf("%w: command has an unterminated double quote", ErrInvalidTarget)
}

// JoinCommand writes argv as a command line SplitCommand reads back,
// single-quoting the words that need it.
func JoinCommand(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>*?()[]{}#~@") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// Change is what a person asks of a job's notification policy: the notify
// flags of jobs add and jobs edit. The zero Change changes nothing.
type Change struct {
	// Specs are target specs (ParseTarget) replacing the job's targets;
	// SpecNone alone removes them all; empty keeps them.
	Specs []string
	// NotifyAfter and RenotifyEvery, when set, replace the policy's.
	NotifyAfter, RenotifyEvery *int
}

// Empty reports whether c changes nothing.
func (c Change) Empty() bool {
	return len(c.Specs) == 0 && c.NotifyAfter == nil && c.RenotifyEvery == nil
}

// Apply returns p changed by c. A bad spec, SpecNone given with other
// specs, or a negative count fails with ErrInvalidTarget.
func (c Change) Apply(p Policy) (Policy, error) {
	p = p.Clone()
	if len(c.Specs) > 0 {
		targets, err := parseSpecs(c.Specs)
		if err != nil {
			return p, err
		}
		p.Targets = targets
	}
	if c.NotifyAfter != nil {
		if *c.NotifyAfter < 1 {
			return p, fmt.Errorf("%w: notify_after must be at least 1", ErrInvalidTarget)
		}
		p.NotifyAfter = *c.NotifyAfter
	}
	if c.RenotifyEvery != nil {
		if *c.RenotifyEvery < 0 {
			return p, fmt.Errorf("%w: renotify_every must not be negative (0: no reminders)", ErrInvalidTarget)
		}
		p.RenotifyEvery = *c.RenotifyEvery
	}
	return p, nil
}

// parseSpecs reads the targets of specs; SpecNone alone is no target.
func parseSpecs(specs []string) ([]Target, error) {
	var out []Target
	for _, s := range specs {
		if strings.TrimSpace(s) == SpecNone {
			if len(specs) > 1 {
				return nil, fmt.Errorf("%w: notify spec %q removes every target and cannot be given with others", ErrInvalidTarget, SpecNone)
			}
			return nil, nil
		}
		t, err := ParseTarget(s)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) > maxTargets {
		return nil, fmt.Errorf("%w: at most %d notify targets", ErrInvalidTarget, maxTargets)
	}
	return out, nil
}

// Describe lists what a person reads about p and a job's streak s, label
// and value, in order.
func (p Policy) Describe(s Streak) [][2]string {
	if len(p.Targets) == 0 {
		return [][2]string{{"notify", SpecNone}}
	}
	var rows [][2]string
	for _, t := range p.Targets {
		v := t.Spec()
		if len(t.On) == 0 {
			v += " (events " + joinEvents(DefaultOn) + ")"
		}
		rows = append(rows, [2]string{"notify", v})
	}
	alerts := fmt.Sprintf("failed after %d consecutive failure(s)", p.Threshold())
	if p.RenotifyEvery > 0 {
		alerts += fmt.Sprintf(", again every %d more", p.RenotifyEvery)
	}
	streak := "-"
	if s.Failures > 0 {
		streak = fmt.Sprintf("%d failure(s)", s.Failures)
		if s.Alerted {
			streak += ", alerted (recovered is sent on the next success)"
		}
	}
	return append(rows, [2]string{"alerts", alerts + "; recovered on the first success after an alert"},
		[2]string{"notify streak", streak})
}

// Kinds names the kinds of p's targets in one word, like "webhook+file";
// "-" when p has none.
func (p Policy) Kinds() string {
	var kinds []string
	for _, t := range p.Targets {
		if !slices.Contains(kinds, string(t.Kind)) {
			kinds = append(kinds, string(t.Kind))
		}
	}
	if len(kinds) == 0 {
		return "-"
	}
	return strings.Join(kinds, "+")
}
