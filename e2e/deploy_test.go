package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/internal/buildtest"
	"github.com/chronoscron/chronos/internal/redistest"
)

// ---- the alert rules and the dashboard ----

// alertRules is deploy/prometheus/alerts.yaml.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// query is one PromQL expression of the deploy files and where it is.
type query struct {
	where, expr string
}

func readAlertRules(t *testing.T) alertRules {
	t.Helper()
	var r alertRules
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &r); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	return r
}

func readDashboard(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "chronos.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("chronos.json: %v", err)
	}
	return d
}

// dashboardPanels returns the dashboard's panels, those inside collapsed
// rows included.
func dashboardPanels(d map[string]any) []map[string]any {
	var out []map[string]any
	var walk func(v any)
	walk = func(v any) {
		list, _ := v.([]any)
		for _, p := range list {
			pm, ok := p.(map[string]any)
			if !ok {
				continue
			}
			out = append(out, pm)
			walk(pm["panels"])
		}
	}
	walk(d["panels"])
	return out
}

// deployQueries returns every expression the alert rules and the dashboard
// evaluate: rule expressions, panel targets and the variables' queries.
func deployQueries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, g := range readAlertRules(t).Groups {
		for _, r := range g.Rules {
			qs = append(qs, query{"alerts.yaml " + r.Alert + r.Record, r.Expr})
		}
	}
	d := readDashboard(t)
	for _, p := range dashboardPanels(d) {
		targets, _ := p["targets"].([]any)
		for _, tg := range targets {
			if expr, _ := tg.(map[string]any)["expr"].(string); expr != "" {
				qs = append(qs, query{fmt.Sprintf("chronos.json panel %q", p["title"]), expr})
			}
		}
	}
	templ, _ := d["templating"].(map[string]any)
	vars, _ := templ["list"].([]any)
	for _, v := range vars {
		vm, _ := v.(map[string]any)
		if vm["type"] != "query" {
			continue
		}
		q := vm["query"]
		if qm, ok := q.(map[string]any); ok {
			q = qm["query"]
		}
		s, _ := q.(string)
		if m := labelValues.FindStringSubmatch(s); m != nil {
			qs = append(qs, query{fmt.Sprintf("chronos.json variable %q", vm["name"]), m[1]})
		} else if s != "" {
			qs = append(qs, query{fmt.Sprintf("chronos.json variable %q", vm["name"]), s})
		}
	}
	return qs
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestAlertRulesAndDashboard checks the deploy files on their own: every
// alert has a severity, a summary, a description and a runbook link to a
// section of docs/operations.md that exists; the dashboard takes its data
// source from a variable, links nowhere outside, and shows each thing an
// operator watches.
func TestAlertRulesAndDashboard(t *testing.T) {
	t.Parallel()
	ops, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(ops), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			anchors[githubAnchor(strings.TrimLeft(h, "#"))] = true
		}
	}
	const runbook = "https://github.com/chronoscron/chronos/blob/main/docs/operations.md#"
	var alerts []string
	for _, g := range readAlertRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, sev)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbook)
			switch {
			case !ok:
				t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
			case anchor != strings.ToLower(r.Alert):
				t.Errorf("%s: runbook anchor %q, want the alert's own section %q", r.Alert, anchor, strings.ToLower(r.Alert))
			case !anchors[anchor]:
				t.Errorf("%s: docs/operations.md has no heading for #%s", r.Alert, anchor)
			}
		}
	}
	// The alerts an operator must hear about, by the metric each watches.
	watched := map[string]bool{}
	for _, q := range deployQueries(t) {
		if !strings.HasPrefix(q.where, "alerts.yaml") {
			continue
		}
		for _, s := range promqlSelectors(q.expr) {
			watched[s.name] = true
		}
	}
	for _, m := range []string{"chronos_nas_fire_lag_seconds_bucket", "chronos_relay_dead_letter", "chronos_nas_deliveries_total",
		"chronos_nas_unarmed_jobs", "chronos_relay_store_up", "chronos_relay_store_lost", "chronos_agent_in_sync",
		"chronos_agent_jwks_age_seconds", "chronos_relay_due_backlog", "chronos_relay_outcomes_total",
		"chronos_agent_store_writable", "chronos_agent_notifications_total"} {
		if !watched[m] {
			t.Errorf("no alert watches %s", m)
		}
	}
	if len(alerts) < 12 {
		t.Errorf("only %d alerts: %v", len(alerts), alerts)
	}

	d := readDashboard(t)
	var dsVar bool
	templ, _ := d["templating"].(map[string]any)
	vars, _ := templ["list"].([]any)
	for _, v := range vars {
		vm, _ := v.(map[string]any)
		if vm["type"] == "datasource" && vm["name"] == "datasource" && vm["query"] == "prometheus" {
			dsVar = true
		}
	}
	if !dsVar {
		t.Error("the dashboard has no Prometheus data source variable named datasource")
	}
	ids := map[float64]bool{}
	shown := map[string]bool{}
	for _, p := range dashboardPanels(d) {
		id, _ := p["id"].(float64)
		if ids[id] {
			t.Errorf("panel id %v used twice", id)
		}
		ids[id] = true
		if p["type"] == "row" {
			continue
		}
		if ds, _ := p["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
			t.Errorf("panel %q: data source %v, want the ${datasource} variable", p["title"], p["datasource"])
		}
		targets, _ := p["targets"].([]any)
		if len(targets) == 0 {
			t.Errorf("panel %q queries nothing", p["title"])
		}
		for _, tg := range targets {
			tm, _ := tg.(map[string]any)
			if ds, _ := tm["datasource"].(map[string]any); ds["uid"] != "${datasource}" {
				t.Errorf("panel %q: a target's data source %v, want the ${datasource} variable", p["title"], tm["datasource"])
			}
			expr, _ := tm["expr"].(string)
			for _, s := range promqlSelectors(expr) {
				shown[s.name] = true
			}
		}
	}
	for _, m := range []string{"chronos_nas_fire_lag_seconds_bucket", "chronos_relay_due_backlog", "chronos_nas_deliveries_total",
		"chronos_relay_dead_letter", "chronos_nas_unarmed_jobs", "chronos_agent_in_sync", "chronos_agent_runs_total",
		"chronos_agent_store_writable", "chronos_agent_jwks_age_seconds", "chronos_agent_notifications_total",
		"chronos_relay_store_up", "chronos_relay_dispatch_lag_seconds_bucket"} {
		if !shown[m] {
			t.Errorf("no dashboard panel shows %s", m)
		}
	}
	// No link out: every string of the dashboard is free of URLs.
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(v) {
				walk(path+"."+k, v[k])
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		case string:
			if strings.Contains(v, "://") {
				t.Errorf("dashboard %s links out: %q", path, v)
			}
		}
	}
	walk("", d)
	if links, _ := d["links"].([]any); len(links) != 0 {
		t.Errorf("dashboard links: %v", links)
	}
}

// ---- what the processes export ----

// exported is what a set of /metrics pages offers: each family's type and,
// per family and label, the values seen.
type exported struct {
	types  map[string]string
	labels map[string]map[string]map[string]bool
}

var (
	typeLine   = regexp.MustCompile(`^# TYPE ([A-Za-z_:][A-Za-z0-9_:]*) (\w+)$`)
	sampleLine = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})? `)
	labelPair  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

// add reads one /metrics page in the text format.
func (e *exported) add(t *testing.T, page string) {
	t.Helper()
	if e.types == nil {
		e.types, e.labels = map[string]string{}, map[string]map[string]map[string]bool{}
	}
	for _, line := range strings.Split(page, "\n") {
		if m := typeLine.FindStringSubmatch(line); m != nil {
			e.types[m[1]] = m[2]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a sample line: %q", line)
		}
		fam := e.family(m[1])
		if fam == "" {
			t.Fatalf("sample %s of no family announced by # TYPE", m[1])
		}
		if e.labels[fam] == nil {
			e.labels[fam] = map[string]map[string]bool{}
		}
		for _, p := range labelPair.FindAllStringSubmatch(m[3], -1) {
			if e.labels[fam][p[1]] == nil {
				e.labels[fam][p[1]] = map[string]bool{}
			}
			e.labels[fam][p[1]][p[2]] = true
		}
	}
}

// family returns the family a series name belongs to ("" if none): the
// name itself for a counter, gauge, untyped metric or a summary's quantiles; for a histogram's
// _bucket, _sum and _count series, and a summary's _sum and _count, the
// name without the suffix. A histogram's own name is no series.
func (e *exported) family(series string) string {
	switch e.types[series] {
	case "counter", "gauge", "untyped", "summary":
		return series
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(series, suffix)
		if !ok {
			continue
		}
		switch e.types[base] {
		case "histogram":
			return base
		case "summary":
			if suffix != "_bucket" {
				return base
			}
		}
	}
	return ""
}

// requestDriven are labels whose values appear only once a request has
// been seen: any value of the right form is accepted.
var requestDriven = map[string]map[string]*regexp.Regexp{
	"chronos_nas_api_requests_total": {"code": regexp.MustCompile(`^[1-5][0-9][0-9]$`)},
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"instance", "job"}

// plainAlternatives matches a regex matcher that is only a|b|c.
var plainAlternatives = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// check reports each selector of the queries that selects nothing the
// processes export: an unknown series, a label the family does not carry,
// or a literal label value it never takes.
func (e *exported) check(t *testing.T, shape string, qs []query) {
	t.Helper()
	for _, q := range qs {
		sels := promqlSelectors(q.expr)
		if len(sels) == 0 {
			t.Errorf("%s: %s: no metric found in %q", shape, q.where, q.expr)
		}
		for _, s := range sels {
			fam := e.family(s.name)
			if fam == "" {
				t.Errorf("%s: %s uses %s, which no process exports", shape, q.where, s.name)
				continue
			}
			for _, m := range s.matchers {
				if slices.Contains(targetLabels, m.label) || (m.label == "le" && e.types[fam] == "histogram") {
					continue
				}
				seen, ok := e.labels[fam][m.label]
				if !ok {
					t.Errorf("%s: %s: %s has no label %s", shape, q.where, fam, m.label)
					continue
				}
				var values []string
				switch {
				case m.op == "=" || m.op == "!=":
					values = []string{m.value}
				case plainAlternatives.MatchString(m.value):
					values = strings.Split(m.value, "|")
				}
				for _, v := range values {
					if re := requestDriven[fam][m.label]; re != nil {
						if !re.MatchString(v) {
							t.Errorf("%s: %s: %s{%s=%q} is not a value it can take", shape, q.where, fam, m.label, v)
						}
						continue
					}
					if !seen[v] {
						t.Errorf("%s: %s: %s{%s=%q}: the processes export only %v", shape, q.where, fam, m.label, v, sortedKeys(seen))
					}
				}
			}
		}
	}
}

// scrape GETs a /metrics page.
func scrape(t *testing.T, url string) string {
	t.Helper()
	code, body := httpGet(url)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", url, code, tail(body, 500))
	}
	return body
}

// sampleValue returns the value of a series without labels on a page.
func sampleValue(page, series string) (float64, bool) {
	for _, line := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// waitInSync waits until the agent's /metrics reports it in sync with NAS.
func waitInSync(t *testing.T, agentMetrics string) {
	t.Helper()
	eventually(t, 30*time.Second, "the agent to be in sync with NAS", func() (bool, string) {
		code, body := httpGet(agentMetrics)
		v, ok := sampleValue(body, "chronos_agent_in_sync")
		return code == 200 && ok && v == 1, fmt.Sprintf("%d, chronos_agent_in_sync %v (present %v)", code, v, ok)
	})
}

// TestDeployMetricsExported starts the real processes of two deployments
// and checks that every series the alert rules and the dashboard query is
// one they export, with the labels and label values the queries name: NAS
// on the embedded engine with its own dispatcher and an agent; and the
// deployment of deploy/compose.yaml run as processes (NAS on Redis, two
// relay processes, the sample agent).
func TestDeployMetricsExported(t *testing.T) {
	qs := deployQueries(t)
	if len(qs) < 30 {
		t.Fatalf("only %d queries read from the deploy files", len(qs))
	}

	t.Run("memory", func(t *testing.T) {
		s := newSystem(t, systemOptions{})
		s.addJob("tick", "every 1h")
		waitInSync(t, s.agentURLs[0]+"/metrics")
		var e exported
		e.add(t, scrape(t, s.internalURL+"/metrics"))
		e.add(t, scrape(t, s.agentURLs[0]+"/metrics"))
		e.check(t, "NAS on the embedded engine", qs)
	})

	t.Run("compose", func(t *testing.T) {
		d := startCompose(t)
		waitInSync(t, d.url("agent", 8787)+"/metrics")
		var e exported
		e.add(t, scrape(t, d.url("nas", 9091)+"/metrics"))
		for _, r := range d.relays {
			e.add(t, scrape(t, d.url(r, 9092)+"/metrics"))
		}
		agentPage := scrape(t, d.url("agent", 8787)+"/metrics")
		e.add(t, agentPage)
		e.check(t, "compose on Redis", qs)
		// The relay processes serve the relay's own metrics, not NAS's.
		relayPage := scrape(t, d.url(d.relays[0], 9092)+"/metrics")
		if !strings.Contains(relayPage, "chronos_relay_outcomes_total") || strings.Contains(relayPage, "chronos_nas_deliveries_total") {
			t.Errorf("a relay process's metrics: want the relay's, not NAS's:\n%s", tail(relayPage, 2000))
		}
		// The sample job is armed at NAS.
		nasPage := scrape(t, d.url("nas", 9091)+"/metrics")
		if v, ok := sampleValue(nasPage, "chronos_relay_armed"); !ok || v < 1 {
			t.Errorf("chronos_relay_armed %v (present %v), want the sample job armed", v, ok)
		}
	})
}

// ---- the container files ----

// composeFile is the part of deploy/compose.yaml the tests read.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
	User        string            `yaml:"user"`
	ReadOnly    bool              `yaml:"read_only"`
	Tmpfs       []string          `yaml:"tmpfs"`
	CapDrop     []string          `yaml:"cap_drop"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return c
}

// dockerStage is one FROM of the Dockerfile and its instructions.
type dockerStage struct {
	from, name string
	instrs     [][2]string // instruction, arguments
}

// readDockerfile returns the Dockerfile's global ARG defaults and stages.
func readDockerfile(t *testing.T) (map[string]string, []dockerStage) {
	t.Helper()
	return readDockerfileAt(t, "Dockerfile")
}

// readDockerfileAt returns the global ARG defaults and stages of the
// Dockerfile at path, relative to the repository's root.
func readDockerfileAt(t *testing.T, path string) (map[string]string, []dockerStage) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	args := map[string]string{}
	var stages []dockerStage
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		instr, rest = strings.ToUpper(instr), strings.TrimSpace(rest)
		switch {
		case instr == "FROM":
			f := strings.Fields(rest)
			st := dockerStage{from: os.Expand(f[0], func(k string) string { return args[k] })}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0 && instr == "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case len(stages) == 0:
			t.Fatalf("Dockerfile: %s before the first FROM", instr)
		default:
			st := &stages[len(stages)-1]
			st.instrs = append(st.instrs, [2]string{instr, rest})
		}
	}
	return args, stages
}

// all returns the arguments of every instruction named instr.
func (s dockerStage) all(instr string) []string {
	var out []string
	for _, i := range s.instrs {
		if i[0] == instr {
			out = append(out, i[1])
		}
	}
	return out
}

// TestDockerfile checks the image's recipe: a Go builder of the go.mod's
// version making a static binary, a final stage that is an empty root file
// system with CA certificates, time zones and a non-root user that exists
// in its passwd, the state volume, and the binary as entrypoint.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	args, stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a builder and a final stage", len(stages))
	}
	gomod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	build := stages[0]
	if goVersion == nil || build.from != "golang:"+string(goVersion[1])+"-bookworm" {
		t.Errorf("builder FROM %s (GO_VERSION %q), want golang of go.mod's go %s", build.from, args["GO_VERSION"], goVersion[1])
	}
	var static bool
	for _, run := range build.all("RUN") {
		if strings.Contains(run, "CGO_ENABLED=0") && strings.Contains(run, "go build") && strings.Contains(run, "-o /out/chronos ./cmd/chronos") {
			static = true
		}
	}
	if !static {
		t.Error("the builder does not build ./cmd/chronos with CGO_ENABLED=0 into /out/chronos")
	}
	final := stages[len(stages)-1]
	if final.from != "scratch" && !strings.HasPrefix(final.from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s, want scratch or distroless static", final.from)
	}
	users := final.all("USER")
	if len(users) == 0 {
		t.Fatal("the final stage has no USER")
	}
	user := users[len(users)-1]
	uid, _, _ := strings.Cut(user, ":")
	if uid == "0" || uid == "root" || uid == "" {
		t.Errorf("final USER %q: want a non-root user", user)
	}
	passwd := regexp.MustCompile(`chronos:x:` + regexp.QuoteMeta(uid) + `:` + regexp.QuoteMeta(uid) + `:[^:]*:/var/lib/chronos:`)
	if !slices.ContainsFunc(build.all("RUN"), passwd.MatchString) {
		t.Errorf("no passwd entry for uid %s with home /var/lib/chronos is written for the final stage", uid)
	}
	copies := strings.Join(final.all("COPY"), "\n")
	for _, want := range []string{"/rootfs/ /", "ca-certificates.crt /etc/ssl/certs/ca-certificates.crt",
		"zoneinfo.zip /usr/local/share/zoneinfo.zip", "/out/chronos /usr/local/bin/chronos"} {
		if !strings.Contains(copies, want) {
			t.Errorf("the final stage does not copy %s", want)
		}
	}
	// The healthcheck is `chronos healthcheck`: nothing but the binary runs.
	if strings.Contains(copies, "busybox") || strings.Contains(copies, "wget") {
		t.Errorf("the final stage copies a second program:\n%s", copies)
	}
	if env := strings.Join(final.all("ENV"), " "); !strings.Contains(env, "ZONEINFO=/usr/local/share/zoneinfo.zip") || !strings.Contains(env, "CHRONOS_HOME=/var/lib/chronos") {
		t.Errorf("final ENV %q: want ZONEINFO and CHRONOS_HOME", env)
	}
	if v := final.all("VOLUME"); len(v) != 1 || !strings.Contains(v[0], `"/var/lib/chronos"`) {
		t.Errorf("VOLUME %v, want /var/lib/chronos", v)
	}
	if e := final.all("ENTRYPOINT"); len(e) != 1 || e[0] != `["/usr/local/bin/chronos"]` {
		t.Errorf("ENTRYPOINT %v, want the binary", e)
	}
	// The directories the user writes are its own; /tmp is there for a tmpfs.
	var owned bool
	for _, run := range build.all("RUN") {
		if strings.Contains(run, "chown "+uid+":"+uid+" /rootfs/etc/chronos /rootfs/var/lib/chronos") && strings.Contains(run, "chmod 1777 /rootfs/tmp") {
			owned = true
		}
	}
	for _, dir := range []string{"/var/lib/chronos", "/etc/chronos"} {
		if !slices.Contains(final.all("COPY"), "--from=build --chown="+uid+":"+uid+" /rootfs"+dir+" "+dir) {
			owned = false
		}
	}
	if !owned {
		t.Error("the final root file system does not give /var/lib/chronos and /etc/chronos to the user, or has no /tmp")
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil || !slices.Contains(strings.Fields(string(ignore)), ".git") {
		t.Errorf(".dockerignore does not leave out .git (%v)", err)
	}
}

// helpFlags returns the long flags `chronos <path> --help` lists, failing
// the test if the command does not exist.
func helpFlags(t *testing.T, path []string) []string {
	t.Helper()
	r := chronos(t, t.TempDir(), nil, append(slices.Clone(path), "--help")...)
	if r.code != 0 || !strings.Contains(r.stdout, "chronos "+strings.Join(path, " ")) {
		t.Fatalf("chronos %s --help: exit %d\n%s%s", strings.Join(path, " "), r.code, r.stdout, r.stderr)
	}
	return regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(r.stdout, -1)
}

// chronosArgs splits a chronos command line into its command path and
// flags: the words before the first flag, and every --flag after.
func chronosArgs(argv []string) (path, flags []string) {
	i := 0
	for i < len(argv) && !strings.HasPrefix(argv[i], "-") {
		path = append(path, argv[i])
		i++
	}
	for ; i < len(argv); i++ {
		if argv[i] == "--" {
			break
		}
		if strings.HasPrefix(argv[i], "--") {
			f, _, _ := strings.Cut(argv[i], "=")
			flags = append(flags, f)
		}
	}
	return path, flags
}

// shellWords splits a line of the setup script into words, honouring
// single and double quotes (enough for the script's chronos lines).
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// TestComposeFile checks deploy/compose.yaml on its own: the services it
// must have, Redis with AOF on a volume, every Chronos service hardened
// (read-only root, /tmp tmpfs, no capabilities, non-root) with a
// healthcheck, built from stages the Dockerfile has, volumes declared, and
// every chronos command line (services and the setup script) naming
// commands and flags the binary has.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	c := readCompose(t)
	_, stages := readDockerfile(t)
	stageNames := map[string]bool{}
	for _, s := range stages {
		stageNames[s.name] = true
	}
	redis, ok := c.Services["redis"]
	if !ok {
		t.Fatal("no redis service")
	}
	if cmd := strings.Join(redis.Command, " "); !strings.Contains(cmd, "--appendonly yes") || !strings.Contains(cmd, "--appendfsync") {
		t.Errorf("redis command %q: want AOF on (--appendonly yes, --appendfsync)", cmd)
	}
	if !slices.ContainsFunc(redis.Volumes, func(v string) bool { return strings.HasSuffix(v, ":/data") }) {
		t.Errorf("redis volumes %v: want a volume on /data", redis.Volumes)
	}
	if redis.Healthcheck == nil {
		t.Error("redis has no healthcheck")
	}
	var relays, agents, nas int
	for _, name := range sortedKeys(c.Services) {
		svc := c.Services[name]
		for dep := range svc.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is no service", name, dep)
			}
		}
		for _, v := range svc.Volumes {
			vol, _, _ := strings.Cut(v, ":")
			if _, ok := c.Volumes[vol]; !ok && !strings.HasPrefix(vol, ".") && !strings.HasPrefix(vol, "/") {
				t.Errorf("%s mounts volume %s, which is not declared", name, vol)
			}
		}
		if svc.Build == nil {
			continue
		}
		if svc.Build.Context != ".." || svc.Build.Dockerfile != "Dockerfile" || !stageNames[svc.Build.Target] {
			t.Errorf("%s builds %+v: want the repository's Dockerfile and one of its stages %v", name, *svc.Build, sortedKeys(stageNames))
		}
		if !svc.ReadOnly {
			t.Errorf("%s: read_only is not set", name)
		}
		if svc.User == "root" || strings.HasPrefix(svc.User, "0") {
			t.Errorf("%s runs as %s", name, svc.User)
		}
		if name == "setup" {
			if len(svc.Entrypoint) == 0 || svc.Entrypoint[0] != "/bin/sh" || len(svc.Command) != 1 {
				t.Fatalf("setup: entrypoint %v command %d items, want a shell script", svc.Entrypoint, len(svc.Command))
			}
			// Compose interpolates $ itself: the script may only use $$.
			if lone := regexp.MustCompile(`(^|[^$])\$([^$]|$)`).FindString(strings.ReplaceAll(svc.Command[0], "$$", "")); lone != "" {
				t.Errorf("setup script has an unescaped $ (%q) that compose would interpolate", lone)
			}
			var lines int
			for _, line := range strings.Split(svc.Command[0], "\n") {
				_, cmd, ok := strings.Cut(line, "|| chronos ")
				if !ok {
					continue
				}
				lines++
				path, flags := chronosArgs(shellWords(cmd))
				known := helpFlags(t, path)
				for _, f := range flags {
					if !slices.Contains(known, f) {
						t.Errorf("setup: chronos %s has no flag %s", strings.Join(path, " "), f)
					}
				}
			}
			if lines != 2 {
				t.Errorf("setup runs chronos %d times, want keys generate and jobs add", lines)
			}
			continue
		}
		if svc.Build.Target != stages[len(stages)-1].name {
			t.Errorf("%s runs target %s, not the final stage", name, svc.Build.Target)
		}
		if !slices.Contains(svc.Tmpfs, "/tmp") {
			t.Errorf("%s: /tmp is not a tmpfs", name)
		}
		if !slices.Contains(svc.CapDrop, "ALL") {
			t.Errorf("%s keeps its capabilities", name)
		}
		if svc.Healthcheck == nil || len(svc.Healthcheck.Test) < 4 || svc.Healthcheck.Test[0] != "CMD" ||
			svc.Healthcheck.Test[1] != "/usr/local/bin/chronos" || svc.Healthcheck.Test[2] != "healthcheck" ||
			!strings.HasSuffix(svc.Healthcheck.Test[len(svc.Healthcheck.Test)-1], "/readyz") {
			t.Errorf("%s: healthcheck %+v, want chronos healthcheck of /readyz", name, svc.Healthcheck)
		} else {
			path, flags := chronosArgs(svc.Healthcheck.Test[2:])
			known := helpFlags(t, path)
			for _, f := range flags {
				if !slices.Contains(known, f) {
					t.Errorf("%s: healthcheck: chronos %s has no flag %s", name, strings.Join(path, " "), f)
				}
			}
		}
		path, flags := chronosArgs(svc.Command)
		known := helpFlags(t, path)
		for _, f := range flags {
			if !slices.Contains(known, f) {
				t.Errorf("%s: chronos %s has no flag %s", name, strings.Join(path, " "), f)
			}
		}
		switch strings.Join(path, " ") {
		case "nas":
			nas++
		case "relay":
			relays++
		case "agent serve":
			agents++
		}
	}
	if nas != 1 || relays != 2 || agents != 1 {
		t.Errorf("%d nas, %d relay, %d agent services; want 1, 2, 1", nas, relays, agents)
	}
}

// ---- the compose deployment as processes ----

// composeRun is deploy/compose.yaml's deployment started as processes on
// loopback: each service's (name, container port) on a port of its own,
// each named volume a directory, Redis the tests' server.
type composeRun struct {
	t      *testing.T
	dir    string
	ports  map[string]int
	vols   map[string]string
	relays []string
}

// port returns the loopback port standing for svc's container port.
func (d *composeRun) port(svc string, port int) int {
	k := fmt.Sprintf("%s:%d", svc, port)
	if p, ok := d.ports[k]; ok {
		return p
	}
	p := freePort(d.t)
	d.ports[k] = p
	return p
}

func (d *composeRun) url(svc string, port int) string {
	return fmt.Sprintf("http://127.0.0.1:%d", d.port(svc, port))
}

var (
	serviceURL = regexp.MustCompile(`(http|redis)://([a-z0-9-]+):(\d+)`)
	selfURL    = regexp.MustCompile(`http://127\.0\.0\.1:(\d+)`)
	listenAddr = regexp.MustCompile(`^(0\.0\.0\.0|127\.0\.0\.1)?:(\d+)$`)
	redisURL   = regexp.MustCompile(`redis://redis:6379(/\d+)?`)
)

// value rewrites a word of service svc's command line or environment for
// loopback: its own listen addresses and loopback URLs to its ports, other
// services' URLs to theirs, the Redis URL to the test's, mount paths to the
// volumes' directories, and the binary's path to the built binary.
func (d *composeRun) value(c composeFile, svc, v, redis string) string {
	if m := listenAddr.FindStringSubmatch(v); m != nil {
		p, _ := strconv.Atoi(m[2])
		return fmt.Sprintf("127.0.0.1:%d", d.port(svc, p))
	}
	if redis != "" {
		v = redisURL.ReplaceAllString(v, redis)
	}
	v = selfURL.ReplaceAllStringFunc(v, func(u string) string {
		p, _ := strconv.Atoi(selfURL.FindStringSubmatch(u)[1])
		return d.url(svc, p)
	})
	v = serviceURL.ReplaceAllStringFunc(v, func(u string) string {
		m := serviceURL.FindStringSubmatch(u)
		if _, ok := c.Services[m[2]]; !ok {
			return u
		}
		p, _ := strconv.Atoi(m[3])
		return fmt.Sprintf("%s://127.0.0.1:%d", m[1], d.port(m[2], p))
	})
	for _, mount := range c.Services[svc].Volumes {
		parts := strings.Split(mount, ":")
		if dir, ok := d.vols[parts[0]]; ok && len(parts) >= 2 {
			v = strings.ReplaceAll(v, parts[1], dir)
		}
	}
	return strings.ReplaceAll(v, "/usr/local/bin/chronos", bin)
}

// envValue is value for an environment variable, where a bare service
// name (a host name, as in an allowlist) is the loopback address.
func (d *composeRun) envValue(c composeFile, svc, v, redis string) string {
	if _, ok := c.Services[v]; ok {
		return "127.0.0.1"
	}
	return d.value(c, svc, v, redis)
}

// imageEnv is the CHRONOS_ environment the final image sets.
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	_, stages := readDockerfile(t)
	env := map[string]string{}
	for _, e := range stages[len(stages)-1].all("ENV") {
		for _, kv := range strings.Fields(e) {
			if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "CHRONOS_") {
				env[k] = v
			}
		}
	}
	return env
}

// startCompose runs deploy/compose.yaml's services as processes: the setup
// script (twice: a second run changes nothing), `chronos nas
// --print-config` on NAS's environment, then each Chronos service in
// dependency order, waiting for its healthcheck's URL where a dependent
// waits for it to be healthy.
func startCompose(t *testing.T) *composeRun {
	t.Helper()
	c := readCompose(t)
	d := &composeRun{t: t, dir: t.TempDir(), ports: map[string]int{}, vols: map[string]string{}}
	for vol := range c.Volumes {
		d.vols[vol] = filepath.Join(d.dir, "vol-"+vol)
		if err := os.MkdirAll(d.vols[vol], 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Redis: the redis service's own command line on a port of its own,
	// its data in the redis-data volume's directory. Where the tests use a
	// Redis of their environment (TEST_REDIS_URL) instead of redis-server,
	// that one, with a prefix of this test's.
	redis := redistest.URL(t) + "/0?prefix=" + redistest.Prefix(t)
	if _, err := exec.LookPath("redis-server"); err == nil || os.Getenv("TEST_REDIS_URL") == "" {
		redis = d.startRedis(c)
	}

	// setup: the script as the container runs it, with chronos on PATH.
	binDir := filepath.Join(d.dir, "bin")
	if err := os.MkdirAll(binDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(binDir, "chronos")); err != nil {
		t.Fatal(err)
	}
	setup := c.Services["setup"]
	script := d.value(c, "setup", strings.ReplaceAll(setup.Command[0], "$$", "$"), redis)
	runSetup := func() map[string]string {
		t.Helper()
		cmd := exec.Command(setup.Entrypoint[0], append(setup.Entrypoint[1:], script)...)
		cmd.Dir = d.dir
		cmd.Env = childEnv("PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("setup script: %v\n%s\nscript:\n%s", err, out, script)
		}
		files := map[string]string{}
		for _, vol := range d.vols {
			_ = filepath.WalkDir(vol, func(p string, de os.DirEntry, err error) error {
				if err == nil && !de.IsDir() {
					b, _ := os.ReadFile(p)
					files[p] = string(b)
				}
				return nil
			})
		}
		return files
	}
	first := runSetup()
	if again := runSetup(); len(again) != len(first) {
		t.Fatalf("a second setup run changed the volumes: %d files, then %d", len(first), len(again))
	} else {
		for p, b := range first {
			if again[p] != b {
				t.Errorf("a second setup run rewrote %s", p)
			}
		}
	}

	envOf := func(svc string) []string {
		env := map[string]string{}
		for k, v := range imageEnv(t) {
			env[k] = v
		}
		for k, v := range c.Services[svc].Environment {
			env[k] = v
		}
		var out []string
		for _, k := range sortedKeys(env) {
			out = append(out, k+"="+d.envValue(c, svc, env[k], redis))
		}
		return out
	}
	// NAS's environment is a configuration NAS accepts, with these files.
	if r := chronos(t, d.dir, envOf("nas"), "nas", "--print-config"); r.code != 0 || !strings.Contains(r.stdout, "store: "+redis) {
		t.Fatalf("chronos nas --print-config on the compose environment: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Start in dependency order.
	started := map[string]bool{"setup": true, "redis": true}
	for len(started) < len(c.Services) {
		progress := false
		for _, name := range sortedKeys(c.Services) {
			svc := c.Services[name]
			if started[name] {
				continue
			}
			ready := true
			for dep := range svc.DependsOn {
				ready = ready && started[dep]
			}
			if !ready {
				continue
			}
			var args []string
			for _, a := range svc.Command {
				args = append(args, d.value(c, name, a, redis))
			}
			p := startProc(t, name, d.dir, envOf(name), args...)
			if svc.Healthcheck != nil {
				hc := svc.Healthcheck.Test
				waitReady(t, p, d.value(c, name, hc[len(hc)-1], redis), 30*time.Second)
				// The service's own healthcheck command, as the runtime runs it.
				var probe []string
				for _, a := range hc[1:] {
					probe = append(probe, d.value(c, name, a, redis))
				}
				if out, err := exec.Command(probe[0], probe[1:]...).CombinedOutput(); err != nil {
					t.Errorf("%s: healthcheck %v: %v\n%s", name, probe, err, out)
				}
			}
			if len(svc.Command) > 0 && svc.Command[0] == "relay" {
				d.relays = append(d.relays, name)
			}
			started[name], progress = true, true
		}
		if !progress {
			t.Fatalf("compose services that never become startable: %v", c.Services)
		}
	}
	return d
}

// startRedis runs redis-server with the redis service's arguments, on a
// loopback port standing for redis:6379 and in the directory of the volume
// mounted on /data, checks that they turn AOF on, and returns the URL of
// database 0 as NAS sees it after rewriting (redis://redis:6379/0).
func (d *composeRun) startRedis(c composeFile) string {
	t := d.t
	t.Helper()
	svc := c.Services["redis"]
	dataDir := ""
	for _, v := range svc.Volumes {
		if vol, path, _ := strings.Cut(v, ":"); path == "/data" {
			dataDir = d.vols[vol]
		}
	}
	if len(svc.Command) == 0 || svc.Command[0] != "redis-server" || dataDir == "" {
		t.Fatalf("redis service: command %v volumes %v, want redis-server with a volume on /data", svc.Command, svc.Volumes)
	}
	port := d.port("redis", 6379)
	args := append(slices.Clone(svc.Command[1:]), "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dataDir, "--daemonize", "no")
	cmd := exec.Command("redis-server", args...)
	out := &buildtest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server %s: %v", strings.Join(args, " "), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("---- output of redis-server:\n%s", tail(out.String(), 3000))
		}
	})
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	client := redistest.ClientOf(t, url)
	var conf map[string]string
	eventually(t, 10*time.Second, "redis-server to answer", func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("redis-server %s ended:\n%s", strings.Join(args, " "), out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var err error
		conf, err = client.ConfigGet(ctx, "append*").Result()
		return err == nil, fmt.Sprint(err)
	})
	if conf["appendonly"] != "yes" || (conf["appendfsync"] != "everysec" && conf["appendfsync"] != "always") {
		t.Errorf("redis with the compose arguments: appendonly %q appendfsync %q, want AOF on", conf["appendonly"], conf["appendfsync"])
	}
	if entries, err := os.ReadDir(dataDir); err != nil || len(entries) == 0 {
		t.Errorf("redis wrote nothing into the redis-data volume (%v)", err)
	}
	return url
}
