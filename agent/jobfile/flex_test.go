package jobfile_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/jobfile"
)

// flexCases are the --flex values jobs add and jobs edit are given, with
// the window they mean or the error they make.
var flexCases = []struct {
	value string
	want  time.Duration
	err   string // "" valid
}{
	{"0", 0, ""},
	{"0s", 0, ""},
	{"90s", 90 * time.Second, ""},
	{"10m", 10 * time.Minute, ""},
	{"1h30m", 90 * time.Minute, ""},
	{"24h", 24 * time.Hour, ""},
	{"-1s", 0, "--flex -1s must not be negative"},
	{"24h0m1s", 0, "--flex 24h0m1s is longer than the most of 24h0m0s"},
	{"25h", 0, "longer than the most"},
	{"1500ms", 0, "--flex 1.5s must be whole seconds"},
	{"soon", 0, `invalid argument "soon" for "--flex" flag`},
	{"10", 0, `invalid argument "10" for "--flex" flag`},
}

// parseFlex reads a jobs verb (add or edit) command line, returning the
// flag set's own error (a value that is not a duration) instead of failing.
func parseFlex(verb string, args ...string) (*jobfile.Flags, *pflag.FlagSet, error) {
	o := &jobfile.Flags{}
	fs := pflag.NewFlagSet("jobs", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	o.Register(fs)
	if verb == "add" {
		o.RegisterAdd(fs)
		fs.String("file", "", "")
	}
	return o, fs, fs.Parse(args)
}

func TestFlagsFlex(t *testing.T) {
	for _, tc := range flexCases {
		t.Run("add "+tc.value, func(t *testing.T) {
			o, fs, err := parseFlex("add", "--schedule", "every 2d", "--flex", tc.value, "--", "true")
			if err == nil {
				var spec agent.JobSpec
				spec, err = o.Spec(fs, fs.Args(), fs.ArgsLenAtDash())
				if err == nil && spec.Flex != tc.want {
					t.Fatalf("flex %s, want %s", spec.Flex, tc.want)
				}
			}
			checkFlexErr(t, err, tc.err)
		})
		t.Run("edit "+tc.value, func(t *testing.T) {
			o, fs, err := parseFlex("edit", "backup", "--flex", tc.value)
			if err == nil {
				var patch agent.JobPatch
				patch, err = o.Patch(fs, fs.Args()[1:], fs.ArgsLenAtDash())
				if err == nil && (patch.Flex == nil || *patch.Flex != tc.want) {
					t.Fatalf("patch flex %v, want %s", patch.Flex, tc.want)
				}
			}
			checkFlexErr(t, err, tc.err)
		})
	}
	// Without --flex, jobs add asks for no window and jobs edit keeps it.
	o, fs, err := parseFlex("add", "--schedule", "@daily", "--", "true")
	if err != nil {
		t.Fatal(err)
	}
	if spec, err := o.Spec(fs, fs.Args(), fs.ArgsLenAtDash()); err != nil || spec.Flex != 0 {
		t.Fatalf("spec without --flex: %v, flex %s", err, spec.Flex)
	}
	if o, fs, err = parseFlex("edit", "backup", "--name", "x"); err != nil {
		t.Fatal(err)
	}
	if patch, err := o.Patch(fs, fs.Args()[1:], fs.ArgsLenAtDash()); err != nil || patch.Flex != nil {
		t.Fatalf("patch without --flex: %v, flex %v", err, patch.Flex)
	}
}

func checkFlexErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error %v", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("error %v, want one containing %q", err, want)
	}
}

func TestParseFlex(t *testing.T) {
	for _, tc := range []struct {
		body string
		want time.Duration
		err  string
	}{
		{"id: x\nschedule: 'every 2d'\ncommand: true\n", 0, ""},
		{"id: x\nschedule: 'every 2d'\ncommand: true\nflex: 10m\n", 10 * time.Minute, ""},
		{`{"id": "x", "schedule": "every 2d", "command": "true", "flex": "24h"}`, 24 * time.Hour, ""},
		{"id: x\nschedule: 'every 2d'\ncommand: true\nflex: soon\n", 0, `flex "soon" is not a duration`},
		{"id: x\nschedule: 'every 2d'\ncommand: true\nflex: -5m\n", 0, "flex -5m0s must not be negative"},
		{"id: x\nschedule: 'every 2d'\ncommand: true\nflex: 36h\n", 0, "flex 36h0m0s is longer than the most of 24h0m0s"},
		{"id: x\nschedule: 'every 2d'\ncommand: true\nflex: 2.5s\n", 0, "whole seconds"},
	} {
		spec, err := jobfile.Parse([]byte(tc.body))
		if tc.err == "" {
			if err != nil || spec.Flex != tc.want {
				t.Errorf("Parse(%q) = flex %s, %v; want %s", tc.body, spec.Flex, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, agent.ErrInvalidJob) || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Parse(%q) = %v, want an invalid job saying %q", tc.body, err, tc.err)
		}
	}
}
