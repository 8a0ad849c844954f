package jobfile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/jobfile"

	"github.com/spf13/pflag"
)

// parsed is a command line of jobs add or jobs edit read by a flag set.
type parsed struct {
	o    *jobfile.Flags
	fs   *pflag.FlagSet
	args []string
	dash int
}

// parseFlags reads args as jobs verb (add or edit) reads them, with the
// --file, --json and --home flags the command and its group add.
func parseFlags(t *testing.T, verb string, args ...string) parsed {
	t.Helper()
	o := &jobfile.Flags{}
	fs := pflag.NewFlagSet("jobs", pflag.ContinueOnError)
	o.Register(fs)
	if verb == "add" {
		o.RegisterAdd(fs)
		fs.String("file", "", "")
	}
	fs.Bool("json", false, "")
	fs.String("home", "", "")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return parsed{o: o, fs: fs, args: fs.Args(), dash: fs.ArgsLenAtDash()}
}

func TestFlagsSpec(t *testing.T) {
	p := parseFlags(t, "add", "--schedule", "@daily", "--id", "backup", "--tz", "Europe/Paris", "--timeout", "5m", "--grace", "1m",
		"--on-interrupt", "retry", "--retry-attempts", "4", "--paused", "--env", "A=1", "--", "/bin/backup", "--full")
	spec, err := p.o.Spec(p.fs, p.args, p.dash)
	if err != nil {
		t.Fatal(err)
	}
	if spec.ID != "backup" || spec.Schedule != "@daily" || spec.Timezone != "Europe/Paris" || spec.Timeout != 5*time.Minute ||
		spec.Grace != time.Minute || spec.Retry.MaxAttempts != 4 || !spec.Paused || spec.PausedReason != "created paused" {
		t.Fatalf("spec %+v", spec)
	}
	if sh := spec.Payload.Shell; sh == nil || len(sh.Argv) != 2 || sh.Argv[1] != "--full" || sh.Env["A"] != "1" {
		t.Fatalf("payload %+v", spec.Payload.Shell)
	}
	if spec.JobKind != job.JobKindPlain {
		t.Fatalf("kind %q, want plain", spec.JobKind)
	}
	if ch := p.o.NotifyChange(p.fs); !ch.Empty() {
		t.Fatalf("notify change %+v with no notify flag", ch)
	}
}

func TestFlagsSpecKindAndHTTP(t *testing.T) {
	p := parseFlags(t, "add", "--schedule", "@hourly", "--kind", "fanout", "--inputs-from", "file:///etc/t", "--retry-attempts", "2",
		"--http-url", "https://example.org/hook", "--http-method", "POST", "--notify", "file:/tmp/n", "--notify-after", "2")
	spec, err := p.o.Spec(p.fs, p.args, p.dash)
	if err != nil {
		t.Fatal(err)
	}
	if spec.JobKind != job.JobKindFanout || spec.Fanout == nil || spec.Fanout.InputsFrom != "file:///etc/t" || spec.Retry.MaxAttempts != 2 {
		t.Fatalf("spec %+v", spec)
	}
	if h := spec.Payload.HTTP; h == nil || h.URL != "https://example.org/hook" || h.Method != "POST" {
		t.Fatalf("payload %+v", spec.Payload)
	}
	ch := p.o.NotifyChange(p.fs)
	if len(ch.Specs) != 1 || ch.NotifyAfter == nil || *ch.NotifyAfter != 2 || ch.RenotifyEvery != nil {
		t.Fatalf("notify change %+v", ch)
	}
}

func TestFlagsSpecRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no schedule", []string{"--", "true"}, "jobs add: --schedule is required"},
		{"argument before --", []string{"--schedule", "@daily", "x", "--", "true"}, `jobs add: unexpected argument "x" before "--"`},
		{"command without --", []string{"--schedule", "@daily", "true"}, `jobs add: put the command after "--" (got "true")`},
		{"http flag without url", []string{"--schedule", "@daily", "--http-body", "x", "--", "true"}, "jobs add: --http-* flags need --http-url"},
		{"env with url", []string{"--schedule", "@daily", "--http-url", "http://x", "--dir", "/tmp"}, "jobs add: --env and --dir apply to commands"},
		{"no payload", []string{"--schedule", "@daily"}, "jobs add: invalid job: give a command or an HTTP URL"},
		{"retry without retry", []string{"--schedule", "@daily", "--retry-backoff", "1s", "--", "true"}, "jobs add: --retry-* flags need --on-interrupt retry"},
		{"kind flag without kind", []string{"--schedule", "@daily", "--depends-on", "a", "--", "true"}, "--depends-on needs --kind workflow"},
		{"file and a flag", []string{"--file", "job.yaml", "--schedule", "@daily"}, "jobs add: --file takes the whole job"},
		{"file and a command", []string{"--file", "job.yaml", "--", "true"}, "jobs add: --file takes the whole job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := parseFlags(t, "add", tc.args...)
			_, err := p.o.Spec(p.fs, p.args, p.dash)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Spec = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestFlagsSpecFileAlone(t *testing.T) {
	p := parseFlags(t, "add", "--file", "job.yaml", "--home", "/tmp/h", "--json")
	if _, err := p.o.Spec(p.fs, p.args, p.dash); err != nil {
		t.Fatalf("Spec under --file with --home and --json: %v", err)
	}
}

func TestFlagsPatch(t *testing.T) {
	// jobs edit's arguments are the job id, then the command after "--".
	withID := func(args ...string) (parsed, []string) {
		p := parseFlags(t, "edit", args...)
		return p, p.args[1:]
	}
	p, rest := withID("backup", "--name", "Backup", "--retry-max-backoff", "1m")
	patch, err := p.o.Patch(p.fs, rest, p.dash)
	if err != nil {
		t.Fatal(err)
	}
	if patch.Name == nil || *patch.Name != "Backup" || patch.Schedule != nil || patch.Payload != nil || patch.Notify != nil ||
		patch.Retry == nil || patch.Retry.MaxBackoff.Std() != time.Minute {
		t.Fatalf("patch %+v", patch)
	}

	p, rest = withID("backup", "--renotify-every", "3", "--", "/bin/backup", "--full")
	if patch, err = p.o.Patch(p.fs, rest, p.dash); err != nil {
		t.Fatal(err)
	}
	if patch.Payload == nil || patch.Payload.Shell == nil || len(patch.Payload.Shell.Argv) != 2 {
		t.Fatalf("payload %+v", patch.Payload)
	}
	if n := patch.Notify; n == nil || n.RenotifyEvery == nil || *n.RenotifyEvery != 3 || n.NotifyAfter != nil || len(n.Specs) != 0 {
		t.Fatalf("notify %+v", patch.Notify)
	}

	for args, want := range map[string]string{
		"backup":                             `jobs edit: nothing to change`,
		"backup x -- true":                   `jobs edit: unexpected argument "x" before "--"`,
		"backup --http-body x":               "jobs edit: --http-* flags need --http-url",
		"backup --http-url http://x -- true": "jobs edit: invalid job: give either a command or an HTTP URL",
	} {
		p, rest := withID(strings.Fields(args)...)
		if _, err := p.o.Patch(p.fs, rest, p.dash); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Patch(%s) = %v, want an error containing %q", args, err, want)
		}
	}
}
