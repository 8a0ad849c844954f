package store

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/agent/runner"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

func open(t *testing.T, home string) *Store {
	t.Helper()
	s, err := Open(home, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func addJob(t *testing.T, s *Store, id string) {
	t.Helper()
	err := s.Update(context.Background(), func(st *State) error {
		return st.Add(&job.Job{ID: id, Schedule: "@daily", Enabled: true})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUpdatePersistsAndReads(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s := open(t, home)
	addJob(t, s, "b")
	addJob(t, s, "a")
	if err := s.Update(context.Background(), func(st *State) error { return st.Add(&job.Job{ID: "a"}) }); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate add: %v", err)
	}
	// A second store on the same home (another process) sees both, ordered.
	jobs, err := open(t, home).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].ID != "b" {
		t.Fatalf("jobs %+v", jobs)
	}
	raw, _ := os.ReadFile(filepath.Join(home, JobsFile))
	if !strings.HasPrefix(string(raw), `{"version":2,"generation":2,"jobs":[`) {
		t.Fatalf("file head %.60q", raw)
	}
	if _, err := s.Get(context.Background(), "zz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	// A failed update writes nothing.
	boom := errors.New("boom")
	if err := s.Update(context.Background(), func(st *State) error {
		st.Job("a").Name = "changed"
		return boom
	}); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(home, JobsFile))
	if string(after) != string(raw) {
		t.Fatal("failed update changed the file")
	}
	if j, _ := s.Get(context.Background(), "a"); j.Name != "" {
		t.Fatalf("failed update leaked into the cache: %q", j.Name)
	}
	// An update that changes nothing does not rewrite the file.
	fp, _ := s.Fingerprint()
	if err := s.Update(context.Background(), func(*State) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if fp2, _ := s.Fingerprint(); fp2 != fp {
		t.Fatal("no-op update rewrote the file")
	}
}

func TestCorruptFileIsKeptAside(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, content, want string
	}{
		{"truncated", `{"version":1,"jobs":[{"id":"a"`, "unexpected EOF"},
		{"not json", "hello", "invalid character"},
		{"no version", `{"jobs":[]}`, "missing version"},
		{"duplicate ids", `{"version":1,"jobs":[{"id":"a"},{"id":"a"}]}`, "appears twice"},
		{"trailing data", `{"version":1,"jobs":[]} {}`, "trailing data"},
		// Text JSON decoding would silently read as U+FFFD, changing the
		// command that runs.
		{"invalid utf-8 in a command", "{\"version\":1,\"jobs\":[\n{\"id\":\"a\",\"payload\":{\"kind\":\"shell\",\"shell\":{\"command\":\"rm -rf /tmp/\xff\"}}}\n]}\n", "invalid UTF-8 at byte 90 (line 2)"},
		{"overlong encoding", "{\"version\":1,\"jobs\":[{\"id\":\"a\",\"name\":\"\xc0\xaf\"}]}", "invalid UTF-8"},
		{"utf-8 encoded surrogate", "{\"version\":1,\"jobs\":[{\"id\":\"a\",\"name\":\"\xed\xa0\x80\"}]}", "invalid UTF-8"},
		{"truncated sequence at the end", "{\"version\":1,\"jobs\":[]}\xe2\x82", "invalid UTF-8"},
		{"lone high surrogate escape", `{"version":1,"jobs":[{"id":"a","name":"x\ud800y"}]}`, `escape \ud800 of a lone UTF-16 surrogate at byte 40`},
		{"high surrogate escape at the end of a string", `{"version":1,"jobs":[{"id":"a","name":"\uD83D"}]}`, "lone UTF-16 surrogate"},
		{"lone low surrogate escape", `{"version":1,"jobs":[{"id":"a","name":"\udc00"}]}`, "lone UTF-16 surrogate"},
		{"two high surrogates", `{"version":1,"jobs":[{"id":"a","name":"\ud83d\ud83d"}]}`, "lone UTF-16 surrogate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			path := filepath.Join(home, JobsFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			s := open(t, home)
			err := s.Update(context.Background(), func(st *State) error { return st.Add(&job.Job{ID: "new"}) })
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrCorrupt with %q", err, tc.want)
			}
			if _, err := s.List(context.Background()); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("list: %v", err)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.content {
				t.Fatal("corrupt file was overwritten")
			}
			copies, _ := filepath.Glob(path + ".corrupt-*")
			if len(copies) != 1 {
				t.Fatalf("copies %v, want one", copies)
			}
			if b, _ := os.ReadFile(copies[0]); string(b) != tc.content {
				t.Fatal("copy differs")
			}
		})
	}
}

// TestTextIsReadExactly pins what the text check lets through: any valid
// UTF-8, escaped surrogate pairs, and a backslash before a "u" that is text
// rather than an escape; each is read back as written.
func TestTextIsReadExactly(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, json, want string }{
		{"non-ascii", `héllo ✓ 日本 🙂`, "héllo ✓ 日本 🙂"},
		{"escaped pair", `\ud83d\ude00 and \u00e9`, "😀 and é"},
		{"escaped backslash then u", `C:\\ud800\\new`, `C:\ud800\new`},
		{"escaped quote then escape", `say \"\u0041\"`, `say "A"`},
		{"control escapes", `a\tb\u001b[0m`, "a\tb\x1b[0m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			content := `{"version":1,"jobs":[{"id":"a","name":"` + tc.json + `","schedule":"@daily","enabled":true}]}`
			if err := os.WriteFile(filepath.Join(home, JobsFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := open(t, home).Get(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if j.Name != tc.want {
				t.Fatalf("name %q, want %q", j.Name, tc.want)
			}
			if copies, _ := filepath.Glob(filepath.Join(home, JobsFile+".corrupt-*")); len(copies) != 0 {
				t.Fatalf("valid text kept aside as corrupt: %v", copies)
			}
		})
	}
}

// TestCheckTextNamesTheField pins that a job whose text is not UTF-8 is
// refused with the path of the offending field, wherever the string is.
func TestCheckTextNamesTheField(t *testing.T) {
	t.Parallel()
	bad := "caf\xe9" // Latin-1, not UTF-8
	tests := []struct {
		name string
		job  job.Job
		want string
	}{
		{"valid", job.Job{ID: "a", Name: "café ✓", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "echo é"}}}, ""},
		{"name", job.Job{ID: "a", Name: bad}, "job.name"},
		{"command", job.Job{ID: "a", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Command: "echo " + bad}}}, "job.payload.shell.command"},
		{"argument", job.Job{ID: "a", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Argv: []string{"echo", bad}}}}, "job.payload.shell.argv[1]"},
		{"env value", job.Job{ID: "a", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Argv: []string{"env"}, Env: map[string]string{"X": bad}}}}, `job.payload.shell.env["X"]`},
		{"env key", job.Job{ID: "a", Payload: runner.Payload{Kind: "shell", Shell: &runner.Shell{Argv: []string{"env"}, Env: map[string]string{bad: "x"}}}}, "job.payload.shell.env (a key)"},
		{"http header", job.Job{ID: "a", Payload: runner.Payload{Kind: "http", HTTP: &runner.HTTP{URL: "https://example.org", Headers: map[string]string{"X-A": bad}}}}, `job.payload.http.headers["X-A"]`},
		{"paused reason", job.Job{ID: "a", PausedReason: bad}, "job.paused_reason"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.job.CheckText()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid job refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want+" is not valid UTF-8")):
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestNewerVersionIsRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, JobsFile), []byte(`{"version":9,"jobs":[]}`), 0o600)
	_, err := open(t, home).List(context.Background())
	if err == nil || !strings.Contains(err.Error(), "format version 9") {
		t.Fatalf("err %v", err)
	}
}

// TestUpdatesSerialise: stores opened separately on one home (separate lock
// descriptors, as separate processes have) never lose an increment.
func TestUpdatesSerialise(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	addJob(t, open(t, home), "counter")
	const workers, each = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		s := open(t, home)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := s.Update(context.Background(), func(st *State) error {
					st.Job("counter").Repeat.Completed++
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	j, err := open(t, home).Get(context.Background(), "counter")
	if err != nil {
		t.Fatal(err)
	}
	if j.Repeat.Completed != workers*each {
		t.Fatalf("count %d, want %d", j.Repeat.Completed, workers*each)
	}
}

func TestLockTimeout(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	holder := open(t, home)
	waiter, err := Open(home, Options{LockTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	held := make(chan struct{})
	release := make(chan struct{})
	go holder.Update(context.Background(), func(*State) error {
		close(held)
		<-release
		return nil
	})
	<-held
	err = waiter.Update(context.Background(), func(*State) error { return nil })
	close(release)
	if !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("err %v, want ErrLockTimeout", err)
	}
}

// TestWriteFailure: a write that fails leaves the file as it was, says so
// with ErrUnwritable and WriteError, and the next write that succeeds
// clears it.
func TestWriteFailure(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	var failing atomic.Bool
	s, err := Open(home, Options{WriteFile: func(path string, data []byte, perm fs.FileMode) error {
		if failing.Load() {
			return errors.New("disk full")
		}
		return atomicfile.Replace(path, data, perm)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	add := func(id string) error {
		return s.Update(t.Context(), func(st *State) error { return st.Add(&job.Job{ID: id}) })
	}
	if err := add("a"); err != nil || s.WriteError() != nil {
		t.Fatalf("add: %v, write error %v", err, s.WriteError())
	}
	before, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	err = add("b")
	if !errors.Is(err, ErrUnwritable) || !errors.Is(s.WriteError(), ErrUnwritable) {
		t.Fatalf("add: %v, write error %v", err, s.WriteError())
	}
	if jobs, _ := s.List(t.Context()); len(jobs) != 1 {
		t.Fatalf("failed write changed the jobs: %+v", jobs)
	}
	if after, err := os.ReadFile(s.Path()); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("failed write changed %s: %v", s.Path(), err)
	}
	failing.Store(false)
	if err := add("b"); err != nil || s.WriteError() != nil {
		t.Fatalf("add after: %v, write error %v", err, s.WriteError())
	}
	if jobs, _ := s.List(t.Context()); len(jobs) != 2 {
		t.Fatalf("jobs %+v", jobs)
	}
}
