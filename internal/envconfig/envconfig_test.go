package envconfig_test

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/internal/envconfig"
)

type inner struct {
	Count   int           `yaml:"count"`
	Wait    time.Duration `yaml:"wait"`
	Deeper  deeper        `yaml:"deeper"`
	Workers *int          `yaml:"workers"`
}

type deeper struct {
	Ratio float64 `yaml:"ratio"`
}

type sample struct {
	Name    string   `yaml:"name"`
	On      bool     `yaml:"on"`
	Items   []string `yaml:"items"`
	Section inner    `yaml:"section"`
	Token   string   `yaml:"-" env:"SAMPLE_TOKEN"`
	Skipped string   `yaml:"-"`
	hidden  string
}

func lookup(m map[string]string) envconfig.Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFieldsNameEveryLeafKey(t *testing.T) {
	t.Parallel()
	var s sample
	_ = s.hidden
	var keys, envs []string
	for _, f := range envconfig.Fields(&s, "APP_") {
		keys = append(keys, f.Key)
		envs = append(envs, f.Env)
	}
	wantKeys := []string{"name", "on", "items", "section.count", "section.wait", "section.deeper.ratio", "section.workers", ""}
	wantEnvs := []string{"APP_NAME", "APP_ON", "APP_ITEMS", "APP_SECTION_COUNT", "APP_SECTION_WAIT", "APP_SECTION_DEEPER_RATIO", "APP_SECTION_WORKERS", "SAMPLE_TOKEN"}
	if !slices.Equal(keys, wantKeys) || !slices.Equal(envs, wantEnvs) {
		t.Fatalf("keys %q envs %q", keys, envs)
	}
	if got := envconfig.Names(&s, "APP_"); !slices.Equal(got, wantEnvs) {
		t.Fatalf("names %q", got)
	}
}

func TestApplySetsEachType(t *testing.T) {
	t.Parallel()
	s := sample{Name: "from-file", Items: []string{"file"}}
	err := envconfig.Apply(&s, "APP_", lookup(map[string]string{
		"APP_NAME":                 " from-env\n",
		"APP_ON":                   "true",
		"APP_ITEMS":                "a, b,,c ",
		"APP_SECTION_COUNT":        "7",
		"APP_SECTION_WAIT":         "1m30s",
		"APP_SECTION_DEEPER_RATIO": "0.5",
		"APP_SECTION_WORKERS":      "0",
		"SAMPLE_TOKEN":             " tok ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := sample{Name: "from-env", On: true, Items: []string{"a", "b", "c"}, Token: "tok",
		Section: inner{Count: 7, Wait: 90 * time.Second, Deeper: deeper{Ratio: 0.5}, Workers: s.Section.Workers}}
	if !reflect.DeepEqual(s, want) || s.Section.Workers == nil || *s.Section.Workers != 0 {
		t.Fatalf("got %+v", s)
	}
	// A variable set to the empty string still wins.
	if err := envconfig.Apply(&s, "APP_", lookup(map[string]string{"APP_NAME": "", "APP_ITEMS": ""})); err != nil || s.Name != "" || s.Items != nil {
		t.Fatalf("empty values: %+v %v", s, err)
	}
}

func TestApplyErrorsNameTheVariableAndKey(t *testing.T) {
	t.Parallel()
	var s sample
	err := envconfig.Apply(&s, "APP_", lookup(map[string]string{"APP_SECTION_WAIT": "soon", "APP_ON": "maybe"}))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"APP_SECTION_WAIT (section.wait)", "APP_ON (on)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestUnknownVariables(t *testing.T) {
	t.Parallel()
	got := envconfig.Unknown(&sample{}, "APP_", []string{
		"APP_NAME=x", "APP_NAEM=x", "APP_SECTION=1", "APP_CONFIG=a.yaml", "OTHER=1", "APP_SECTION_DEEPER_RATIO=",
	}, "APP_CONFIG")
	if !slices.Equal(got, []string{"APP_NAEM", "APP_SECTION"}) {
		t.Fatalf("unknown %q", got)
	}
}

func TestDocumentNestsAndComments(t *testing.T) {
	t.Parallel()
	n := 3
	s := sample{Name: "svc", Items: []string{"a"}, Token: "never-printed", Section: inner{Wait: time.Minute, Workers: &n}}
	out, err := envconfig.Document(&s, "APP_")
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{"name: svc # APP_NAME", "items: [a] # APP_ITEMS", "  wait: 1m0s # APP_SECTION_WAIT", "    ratio: 0 # APP_SECTION_DEEPER_RATIO", "  workers: 3 # APP_SECTION_WORKERS"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	if strings.Contains(text, "never-printed") || strings.Contains(text, "SAMPLE_TOKEN") {
		t.Errorf("an environment-only field was printed:\n%s", text)
	}
	// The layout is the struct's: it decodes back strictly.
	var back struct {
		Name    string   `yaml:"name"`
		On      bool     `yaml:"on"`
		Items   []string `yaml:"items"`
		Section struct {
			Count   int    `yaml:"count"`
			Wait    string `yaml:"wait"`
			Deeper  deeper `yaml:"deeper"`
			Workers int    `yaml:"workers"`
		} `yaml:"section"`
	}
	dec := yaml.NewDecoder(strings.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&back); err != nil || back.Section.Wait != "1m0s" || back.Section.Workers != 3 {
		t.Fatalf("decode back: %+v %v", back, err)
	}
}

// pairs is a map set from the environment through encoding.TextUnmarshaler.
type pairs map[string]string

func (p *pairs) UnmarshalText(b []byte) error {
	m := pairs{}
	for _, kv := range strings.Split(string(b), ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return errors.New("want k=v;k=v")
		}
		m[k] = v
	}
	*p = m
	return nil
}

func TestApplyUsesTextUnmarshaler(t *testing.T) {
	var cfg struct {
		Tags pairs `yaml:"tags"`
	}
	env := map[string]string{"X_TAGS": " a=1;b=2 "}
	if err := envconfig.Apply(&cfg, "X_", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Tags, pairs{"a": "1", "b": "2"}) {
		t.Fatalf("tags %v", cfg.Tags)
	}
	env["X_TAGS"] = "nope"
	if err := envconfig.Apply(&cfg, "X_", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil || !strings.Contains(err.Error(), "X_TAGS (tags): want k=v") {
		t.Fatalf("bad value: %v", err)
	}
}

// TestOptionalFloat: a *float64 is nil until set, set from the variable
// (0 too, which a plain float64 could not tell from unset), and printed
// as its value or null.
func TestOptionalFloat(t *testing.T) {
	t.Parallel()
	type opt struct {
		Rate *float64 `yaml:"rate"`
	}
	var o opt
	if err := envconfig.Apply(&o, "APP_", lookup(nil)); err != nil || o.Rate != nil {
		t.Fatalf("unset: %v %v", o.Rate, err)
	}
	for in, want := range map[string]float64{"0": 0, " 2.5 ": 2.5, "-1": -1} {
		var o opt
		if err := envconfig.Apply(&o, "APP_", lookup(map[string]string{"APP_RATE": in})); err != nil || o.Rate == nil || *o.Rate != want {
			t.Errorf("%q: %v %v", in, o.Rate, err)
		}
	}
	if err := envconfig.Apply(&opt{}, "APP_", lookup(map[string]string{"APP_RATE": "fast"})); err == nil || !strings.Contains(err.Error(), "APP_RATE (rate)") {
		t.Errorf("a bad value: %v", err)
	}
	for _, tt := range []struct {
		rate *float64
		want string
	}{{nil, "rate: null # APP_RATE\n"}, {new(3.5), "rate: 3.5 # APP_RATE\n"}} {
		out, err := envconfig.Document(&opt{Rate: tt.rate}, "APP_")
		if err != nil || string(out) != tt.want {
			t.Errorf("document %q %v, want %q", out, err, tt.want)
		}
	}
}
