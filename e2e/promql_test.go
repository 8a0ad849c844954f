package e2e

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// A selector a PromQL expression uses: a metric name and the label
// matchers written in its braces.
type selector struct {
	name     string
	matchers []matcher
}

// matcher is one label matcher of a selector.
type matcher struct {
	label, op, value string
}

var (
	// braces is a selector's name (optional) and its label matchers.
	braces = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}`)
	// oneMatcher is label op "value" inside braces.
	oneMatcher = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	// clauses are the modifiers whose parentheses hold label names, not
	// expressions.
	clauses = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	// ranges are range and subquery brackets ([5m], [$__rate_interval], [1h:1m]).
	ranges = regexp.MustCompile(`\[[^\]]*\]`)
	// strs are string literals left outside braces (label_replace's arguments).
	strs = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	// variables are Grafana's template variables.
	variables = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	// ident is a name not glued to a number (1e3, 5m) or a field access.
	ident = regexp.MustCompile(`(^|[^A-Za-z0-9_:.])([A-Za-z_:][A-Za-z0-9_:]*)`)
	// labelValues is Grafana's label_values(metric, label) variable query.
	labelValues = regexp.MustCompile(`label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)`)
)

// promqlKeywords are identifiers of PromQL that are not metric names.
var promqlKeywords = []string{"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
	"group_right", "bool", "offset", "inf", "nan", "atan2", "start", "end"}

// promqlSelectors returns the series an expression selects, in order of
// appearance, without repeats: names before braces (with their matchers)
// and bare names used as series; functions and aggregations (an identifier
// followed by "("), keywords, numbers, durations, strings, grouping labels
// and Grafana variables are not names.
func promqlSelectors(expr string) []selector {
	var out []selector
	seen := map[string]int{}
	add := func(s selector) {
		if i, ok := seen[s.name]; ok {
			out[i].matchers = append(out[i].matchers, s.matchers...)
			return
		}
		seen[s.name] = len(out)
		out = append(out, s)
	}
	e := variables.ReplaceAllStringFunc(expr, func(v string) string {
		// a variable in a label value stays a value; elsewhere it is a
		// duration or an interval.
		return "VAR"
	})
	// Selectors with braces first; keep the name so it is seen again below
	// at its place, and drop the braces.
	e = braces.ReplaceAllStringFunc(e, func(m string) string {
		sub := braces.FindStringSubmatch(m)
		s := selector{name: sub[1]}
		for _, mm := range oneMatcher.FindAllStringSubmatch(sub[2], -1) {
			if mm[1] == "__name__" && mm[2] == "=" {
				s.name = mm[3]
				continue
			}
			s.matchers = append(s.matchers, matcher{label: mm[1], op: mm[2], value: mm[3]})
		}
		if s.name != "" {
			add(s)
		}
		return " " + sub[1] + " "
	})
	e = clauses.ReplaceAllString(e, " ")
	e = ranges.ReplaceAllString(e, " ")
	e = strs.ReplaceAllString(e, " ")
	for _, loc := range ident.FindAllStringSubmatchIndex(e, -1) {
		name := e[loc[4]:loc[5]]
		rest := strings.TrimLeft(e[loc[5]:], " \t\n")
		if strings.HasPrefix(rest, "(") || slices.Contains(promqlKeywords, strings.ToLower(name)) || name == "VAR" {
			continue
		}
		add(selector{name: name})
	}
	return out
}

func TestPromQLSelectors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr string
		want []string
	}{
		{`histogram_quantile(0.99, sum by (le) (rate(chronos_nas_fire_lag_seconds_bucket[5m]))) > 5`,
			[]string{"chronos_nas_fire_lag_seconds_bucket"}},
		{`sum(rate(a_total{outcome="retry"}[10m])) / sum(rate(a_total{outcome=~"x|y"}[10m])) > 0.5`,
			[]string{"a_total"}},
		{`(max(due) > 0) unless on () (sum(rate(outcomes_total[5m])) > 0)`, []string{"due", "outcomes_total"}},
		{`count(in_sync{instance=~"$agent"} == 0) or vector(0)`, []string{"in_sync"}},
		{`sum by (instance) (rate(f{outcome="a"}[$__rate_interval])) > 0 unless on (instance) sum by (instance) (rate(f{outcome="b"}[10m])) > 1e3`,
			[]string{"f"}},
		{`up == 0 and on(job) absent(other_metric)`, []string{"up", "other_metric"}},
		{`max_over_time(lost[15m:1m]) > 0 offset 5m`, []string{"lost"}},
		{`{__name__="by_name", job="x"}`, []string{"by_name"}},
		{`label_replace(m, "dst", "$1", "src", "(.*)")`, []string{"m"}},
		{`sum without (instance) (m:recorded) * bool 2`, []string{"m:recorded"}},
	}
	for _, c := range cases {
		var got []string
		for _, s := range promqlSelectors(c.expr) {
			got = append(got, s.name)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("promqlSelectors(%q) = %v, want %v", c.expr, got, c.want)
		}
	}
	sel := promqlSelectors(`rate(x{outcome="retry", code!="5"}[1m]) + x{kind=~"a|b"}`)
	want := []matcher{{"outcome", "=", "retry"}, {"code", "!=", "5"}, {"kind", "=~", "a|b"}}
	if len(sel) != 1 || !slices.Equal(sel[0].matchers, want) {
		t.Errorf("matchers = %+v, want one selector x with %+v", sel, want)
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
