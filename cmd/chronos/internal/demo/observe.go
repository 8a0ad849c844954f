package demo

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// attrs are the attributes of one record, flattened (groups joined by dots).
type attrs map[string]slog.Value

// str reads an attribute as a string ("" when absent).
func (a attrs) str(k string) string {
	v, ok := a[k]
	if !ok {
		return ""
	}
	return v.Resolve().String()
}

// time reads an attribute that is a time.Time or an RFC 3339 string.
func (a attrs) time(k string) (time.Time, bool) {
	v, ok := a[k]
	if !ok {
		return time.Time{}, false
	}
	v = v.Resolve()
	if v.Kind() == slog.KindTime {
		return v.Time(), true
	}
	if v.Kind() == slog.KindAny {
		if t, ok := v.Any().(fmt.Stringer); ok {
			if p, err := time.Parse(time.RFC3339Nano, t.String()); err == nil {
				return p, true
			}
		}
	}
	t, err := time.Parse(time.RFC3339Nano, v.String())
	return t, err == nil
}

// rest formats the attributes other than skip as " k=v ...", sorted.
func (a attrs) rest(skip ...string) string {
	keys := make([]string, 0, len(a))
outer:
	for k := range a {
		for _, s := range skip {
			if k == s {
				continue outer
			}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%s", k, a[k].Resolve().String())
	}
	return b.String()
}

// observeHandler is a slog.Handler that passes every record at or above
// Info (NAS's from Debug) to a narrator, tagged with the side that logged it (nas, relay,
// agent). The agent names the part of it that logs in a "component"
// attribute (runtime, http, fireauth, ...), which the narrator reads too.
type observeHandler struct {
	narrator *narrator
	side     string
	attrs    []slog.Attr
	group    string
}

var _ slog.Handler = (*observeHandler)(nil)

// Enabled implements slog.Handler.
func (h *observeHandler) Enabled(_ context.Context, l slog.Level) bool {
	if h.side == "nas" {
		// NAS logs each arm and fire at Debug (INFO has its summary).
		return l >= slog.LevelDebug
	}
	return l >= slog.LevelInfo
}

// Handle implements slog.Handler.
func (h *observeHandler) Handle(_ context.Context, r slog.Record) error {
	a := attrs{}
	for _, at := range h.attrs {
		flatten(a, "", at)
	}
	r.Attrs(func(at slog.Attr) bool {
		flatten(a, h.group, at)
		return true
	})
	h.narrator.observe(source{side: h.side, component: a.str(componentKey)}, r.Level, r.Message, a)
	return nil
}

// flatten adds at to a, groups flattened into dotted keys under prefix.
func flatten(a attrs, prefix string, at slog.Attr) {
	v := at.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if at.Key != "" {
			p += at.Key + "."
		}
		for _, g := range v.Group() {
			flatten(a, p, g)
		}
		return
	}
	a[prefix+at.Key] = v
}

// WithAttrs implements slog.Handler.
func (h *observeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, at := range as {
		if h.group != "" {
			at = slog.Attr{Key: strings.TrimSuffix(h.group, ".") + "." + at.Key, Value: at.Value}
		}
		c.attrs = append(c.attrs, at)
	}
	return &c
}

// WithGroup implements slog.Handler.
func (h *observeHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}
