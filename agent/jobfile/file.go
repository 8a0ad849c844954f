package jobfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/agent/store"
)

// DefaultMaxSize caps a job spec file when Read is given no limit.
const DefaultMaxSize = 1 << 20

// File is a job spec file. Its keys are the job record's names; command
// is a string (run by sh -c) or a list (run directly); window is the
// idempotency window (none, hourly, daily, weekly) or, for a workflow, a
// duration: how far back to look for each dependency's run.
type File struct {
	ID          string            `yaml:"id"`
	Name        string            `yaml:"name"`
	Schedule    string            `yaml:"schedule"`
	Timezone    string            `yaml:"timezone"`
	Kind        string            `yaml:"kind"`
	Command     yaml.Node         `yaml:"command"`
	Env         map[string]string `yaml:"env"`
	Dir         string            `yaml:"dir"`
	HTTP        *HTTP             `yaml:"http"`
	Timeout     string            `yaml:"timeout"`
	Grace       string            `yaml:"grace"`
	Flex        string            `yaml:"flex"`
	Repeat      int               `yaml:"repeat"`
	Misfire     string            `yaml:"misfire"`
	Overlap     string            `yaml:"overlap"`
	Window      string            `yaml:"window"`
	OnInterrupt string            `yaml:"on_interrupt"`
	Retry       *Retry            `yaml:"retry"`
	Paused      bool              `yaml:"paused"`

	DependsOn []string `yaml:"depends_on"`
	OnMissing string   `yaml:"on_missing"`
	OnDepFail string   `yaml:"on_dep_fail"`

	InputsFrom       string   `yaml:"inputs_from"`
	Concurrency      int      `yaml:"concurrency"`
	PerItemTimeout   string   `yaml:"per_item_timeout"`
	PartialTolerance float64  `yaml:"partial_tolerance"`
	ItemVar          string   `yaml:"item_var"`
	Reducer          *Reducer `yaml:"reducer"`
}

// HTTP is an http payload.
type HTTP struct {
	URL             string            `yaml:"url"`
	Method          string            `yaml:"method"`
	Headers         map[string]string `yaml:"headers"`
	Body            string            `yaml:"body"`
	Accept          []int             `yaml:"accept"`
	FollowRedirects bool              `yaml:"follow_redirects"`
}

// Retry is the retry policy.
type Retry struct {
	MaxAttempts int    `yaml:"max_attempts"`
	Backoff     string `yaml:"backoff"`
	MaxBackoff  string `yaml:"max_backoff"`
}

// Reducer is a fanout's reducer.
type Reducer struct {
	Command string `yaml:"command"`
	RunOn   string `yaml:"run_on"`
}

// Read reads the job spec file at path ("-": r) unless it is larger than
// lim (DefaultMaxSize when lim.Bytes is not positive): a file over it is
// refused before it is read, a stream once it passes it, with a
// *store.TooLargeError naming the file, the limit and lim's setting.
func Read(path string, r io.Reader, lim store.Limit) (agent.JobSpec, error) {
	if lim.Bytes <= 0 {
		lim.Bytes = DefaultMaxSize
	}
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return agent.JobSpec{}, fmt.Errorf("job file: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := store.ReadLimited(r, path, lim)
	if err != nil {
		return agent.JobSpec{}, fmt.Errorf("job file: %w", err)
	}
	return Parse(b)
}

// Parse reads a job spec file's content (YAML, or JSON, which YAML reads
// too). Unknown keys are errors; errors wrap agent.ErrInvalidJob.
func Parse(b []byte) (agent.JobSpec, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("empty")
		}
		return agent.JobSpec{}, fmt.Errorf("%w: job file: %w", agent.ErrInvalidJob, err)
	}
	spec, err := f.Spec()
	if err != nil {
		return agent.JobSpec{}, fmt.Errorf("%w: job file: %w", agent.ErrInvalidJob, err)
	}
	return spec, nil
}

// Spec turns the file into a job spec.
func (f *File) Spec() (agent.JobSpec, error) {
	s := agent.JobSpec{ID: f.ID, Name: f.Name, Schedule: f.Schedule, Timezone: f.Timezone, Repeat: f.Repeat,
		Misfire: f.Misfire, Overlap: f.Overlap, Window: f.Window, OnInterrupt: f.OnInterrupt, Paused: f.Paused}
	if f.Paused {
		s.PausedReason = "created paused"
	}
	var err error
	if s.Payload, err = f.payload(); err != nil {
		return s, err
	}
	var perItem, backoff, maxBackoff time.Duration
	retry := f.Retry
	if retry == nil {
		retry = &Retry{}
	}
	for _, d := range []struct {
		key, in string
		out     *time.Duration
	}{{"timeout", f.Timeout, &s.Timeout}, {"grace", f.Grace, &s.Grace}, {"flex", f.Flex, &s.Flex}, {"per_item_timeout", f.PerItemTimeout, &perItem},
		{"retry.backoff", retry.Backoff, &backoff}, {"retry.max_backoff", retry.MaxBackoff, &maxBackoff}} {
		if d.in == "" {
			continue
		}
		if *d.out, err = time.ParseDuration(d.in); err != nil {
			return s, fmt.Errorf("%s %q is not a duration (90s, 30m, 24h)", d.key, d.in)
		}
	}
	if err := agent.CheckFlex(s.Flex); err != nil {
		return s, err
	}
	s.Retry = job.Retry{MaxAttempts: retry.MaxAttempts, Backoff: job.Duration(backoff), MaxBackoff: job.Duration(maxBackoff)}
	return s, f.kind(&s, perItem)
}

// kind sets the job kind settings, with the rules of the kind flags.
func (f *File) kind(s *agent.JobSpec, perItem time.Duration) error {
	flags := KindFlags{Kind: f.Kind, DependsOn: f.DependsOn, OnMissing: f.OnMissing, OnDepFail: f.OnDepFail,
		InputsFrom: f.InputsFrom, Concurrency: f.Concurrency, PerItemTimeout: perItem, PartialTolerance: f.PartialTolerance, ItemVar: f.ItemVar}
	if f.Reducer != nil {
		flags.Reducer, flags.ReducerRunOn = f.Reducer.Command, f.Reducer.RunOn
	}
	set := map[string]bool{
		"depends-on": len(f.DependsOn) > 0, "on-missing": f.OnMissing != "", "on-dep-fail": f.OnDepFail != "",
		"inputs-from": f.InputsFrom != "", "concurrency": f.Concurrency != 0, "per-item-timeout": perItem != 0,
		"partial-tolerance": f.PartialTolerance != 0, "item-var": f.ItemVar != "", "reducer": f.Reducer != nil,
	}
	if err := flags.Apply(func(n string) bool { return set[n] }, s); err != nil {
		return errors.New(strings.NewReplacer("--", "", "-", "_").Replace(err.Error()))
	}
	return nil
}

func (f *File) payload() (runner.Payload, error) {
	ps := agent.PayloadSpec{Dir: f.Dir}
	for k, v := range f.Env {
		ps.Env = append(ps.Env, k+"="+v)
	}
	sort.Strings(ps.Env)
	switch f.Command.Kind {
	case 0:
	case yaml.ScalarNode:
		ps.Command = []string{f.Command.Value}
	case yaml.SequenceNode:
		if err := f.Command.Decode(&ps.Command); err != nil {
			return runner.Payload{}, fmt.Errorf("command: %w", err)
		}
	default:
		return runner.Payload{}, errors.New("command must be a string or a list of strings")
	}
	if h := f.HTTP; h != nil {
		ps.HTTPURL, ps.Method, ps.Body, ps.Accept, ps.FollowRedirects = h.URL, h.Method, h.Body, h.Accept, h.FollowRedirects
		for k, v := range h.Headers {
			ps.Headers = append(ps.Headers, k+": "+v)
		}
		sort.Strings(ps.Headers)
	}
	return ps.Payload()
}
