package store

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/job"
)

// logBuffer is a log destination that tests read while the store writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// limitedStore opens a store of home whose jobs.json may hold max bytes,
// logging to the returned buffer.
func limitedStore(t *testing.T, home string, max int64) (*Store, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	s, err := Open(home, Options{
		MaxFile: Limit{Bytes: max, Setting: "max_jobs_file_bytes"},
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
		Now:     func() time.Time { return time.Date(2026, 6, 18, 9, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// TestReadLimited pins the size check of a file read whole: a file over
// the limit is refused before it is read, a stream once it passes it, and
// the error names the file, its size, the limit and the setting.
func TestReadLimited(t *testing.T) {
	t.Parallel()
	lim := Limit{Bytes: 100, Setting: "max_spec_file_bytes"}
	for _, tc := range []struct {
		name   string
		size   int
		stream bool
		want   string // "" for no error
	}{
		{name: "empty file", size: 0},
		{name: "file at the limit", size: 100},
		{name: "file one byte over", size: 101, want: "f.yaml is 101 bytes, over the limit of 100 bytes set by max_spec_file_bytes"},
		{name: "large file", size: 5000, want: "f.yaml is 5000 bytes, over the limit of 100 bytes set by max_spec_file_bytes"},
		{name: "stream at the limit", size: 100, stream: true},
		{name: "stream over", size: 5000, stream: true, want: "f.yaml is more than 100 bytes, over the limit of 100 bytes set by max_spec_file_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			content := bytes.Repeat([]byte("x"), tc.size)
			var b []byte
			var err error
			if tc.stream {
				b, err = ReadLimited(bytes.NewReader(content), "f.yaml", lim)
			} else {
				path := filepath.Join(t.TempDir(), "f.yaml")
				if werr := os.WriteFile(path, content, 0o600); werr != nil {
					t.Fatal(werr)
				}
				f, oerr := os.Open(path)
				if oerr != nil {
					t.Fatal(oerr)
				}
				defer f.Close()
				b, err = ReadLimited(f, "f.yaml", lim)
				if err != nil {
					// Refused before reading: nothing of the file was read.
					if off, _ := f.Seek(0, 1); off != 0 {
						t.Fatalf("%d bytes were read before the file was refused", off)
					}
				}
			}
			if tc.want == "" {
				if err != nil || len(b) != tc.size {
					t.Fatalf("read %d bytes, %v; want %d bytes", len(b), err, tc.size)
				}
				return
			}
			if !errors.Is(err, ErrTooLarge) || err.Error() != tc.want {
				t.Fatalf("error %v, want %q (ErrTooLarge)", err, tc.want)
			}
		})
	}
}

// TestOversizeJobsFileRefused pins that a store that never read jobs.json
// good refuses one over its limit, unread and untouched, with an error
// naming the file, its size, the limit and the setting; a change is
// refused too.
func TestOversizeJobsFileRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	path := filepath.Join(home, JobsFile)
	big := `{"version":2,"generation":1,"jobs":[]}` + strings.Repeat(" ", 4000) + "\n"
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ := limitedStore(t, home, 1024)
	for name, op := range map[string]func() error{
		"list": func() error { _, err := s.List(context.Background()); return err },
		"update": func() error {
			return s.Update(context.Background(), func(st *State) error { return st.Add(&job.Job{ID: "a"}) })
		},
	} {
		err := op()
		want := path + " is " + strconv.Itoa(len(big)) + " bytes, over the limit of 1024 bytes set by max_jobs_file_bytes"
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want ErrTooLarge naming %q", name, err, want)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != big {
		t.Fatal("jobs.json was changed")
	}
	if h := s.Health(context.Background()); h == nil || !strings.Contains(h.Error(), "over the limit of 1024 bytes set by max_jobs_file_bytes") || strings.Contains(h.Error(), home) {
		t.Fatalf("Health %v, want the limit named without the home's path", h)
	}
}

// TestLastGoodKept pins what a store that read jobs.json good does when
// the file then turns bad under it: reads answer from the last good jobs,
// a change that fails leaves them as they were, the next change writes
// them back with the change over the bad file (kept aside first), one
// warning is logged per bad content, and Health reports the file bad until
// it is replaced.
func TestLastGoodKept(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, bad, reason string
	}{
		{"garbage", "\x00\x01 not json at all", "jobs.json does not parse"},
		{"cut short", `{"version":2,"generation":9,"jobs":[{"id":"a"`, "jobs.json does not parse"},
		{"oversize", `{"version":2,"generation":9,"jobs":[]}` + strings.Repeat(" ", 3000), "jobs.json is 3038 bytes, over the limit of 2048 bytes set by max_jobs_file_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			home := t.TempDir()
			path := filepath.Join(home, JobsFile)
			s, logs := limitedStore(t, home, 2048)
			addJob(t, s, "a")
			addJob(t, s, "b")
			if err := os.WriteFile(path, []byte(tc.bad), 0o600); err != nil {
				t.Fatal(err)
			}
			// Reads answer from the last good jobs, twice, with one warning.
			for range 2 {
				jobs, err := s.List(ctx)
				if err != nil || len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].ID != "b" {
					t.Fatalf("list while jobs.json is bad: %+v, %v", jobs, err)
				}
			}
			if n := strings.Count(logs.String(), "jobs.json on disk is bad"); n != 1 {
				t.Fatalf("%d warnings of the bad file, want 1:\n%s", n, logs)
			}
			h := s.Health(ctx)
			if h == nil || !strings.Contains(h.Error(), tc.reason) || !strings.Contains(h.Error(), "last good jobs") {
				t.Fatalf("Health %v, want %q and the last good jobs", h, tc.reason)
			}
			// Another process, which never read the file good, refuses it.
			fresh, _ := limitedStore(t, home, 2048)
			if _, err := fresh.List(ctx); err == nil {
				t.Fatal("a fresh store read the bad file")
			}
			// A change that fails leaves the held jobs as they were.
			failed := errors.New("no")
			err := s.Update(ctx, func(st *State) error {
				st.Job("a").Name = "changed"
				return failed
			})
			if !errors.Is(err, failed) {
				t.Fatalf("failed update: %v", err)
			}
			if j, err := s.Get(ctx, "a"); err != nil || j.Name != "" {
				t.Fatalf("after a failed change: %+v, %v", j, err)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.bad {
				t.Fatal("a failed change touched the bad file")
			}
			// The next change writes the last good jobs and the change back.
			if err := s.Update(ctx, func(st *State) error {
				st.Job("b").Name = "renamed"
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			jobs, err := open(t, home).List(ctx)
			if err != nil || len(jobs) != 2 || jobs[0].ID != "a" || jobs[1].Name != "renamed" {
				t.Fatalf("jobs.json after the change: %+v, %v", jobs, err)
			}
			copies, _ := filepath.Glob(path + ".corrupt-*")
			if len(copies) != 1 {
				t.Fatalf("copies %v, want the bad file kept once", copies)
			}
			if b, _ := os.ReadFile(copies[0]); string(b) != tc.bad {
				t.Fatalf("the copy holds %.40q, want the bad file", b)
			}
			if !strings.Contains(logs.String(), "the bad jobs.json was replaced") {
				t.Fatalf("no warning of the replacement:\n%s", logs)
			}
			if h := s.Health(ctx); h != nil {
				t.Fatalf("Health after the rewrite: %v", h)
			}
			// Later changes are records again, as before.
			addJob(t, s, "c")
			if jobs, err := open(t, home).List(ctx); err != nil || len(jobs) != 3 {
				t.Fatalf("after another change: %+v, %v", jobs, err)
			}
		})
	}
}

// TestLastGoodDroppedWhenFixed pins that a jobs.json fixed on disk (by the
// operator) while the last good jobs are held is read again, and that a
// second, different bad content is warned of again.
func TestLastGoodDroppedWhenFixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	home := t.TempDir()
	path := filepath.Join(home, JobsFile)
	s, logs := limitedStore(t, home, 1<<20)
	addJob(t, s, "a")
	for i, bad := range []string{"garbage one", "garbage two"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if jobs, err := s.List(ctx); err != nil || len(jobs) != 1 {
			t.Fatalf("list while bad: %+v, %v", jobs, err)
		}
		if n := strings.Count(logs.String(), "jobs.json on disk is bad"); n != i+1 {
			t.Fatalf("%d warnings after bad content %d, want %d", n, i+1, i+1)
		}
	}
	fixed := `{"version":2,"generation":40,"jobs":[` + "\n" + `{"id":"z","schedule":"@daily","enabled":true}` + "\n]}\n"
	if err := os.WriteFile(path, []byte(fixed), 0o600); err != nil {
		t.Fatal(err)
	}
	jobs, err := s.List(ctx)
	if err != nil || len(jobs) != 1 || jobs[0].ID != "z" {
		t.Fatalf("list after the fix: %+v, %v", jobs, err)
	}
	if h := s.Health(ctx); h != nil {
		t.Fatalf("Health after the fix: %v", h)
	}
	if b, _ := os.ReadFile(path); string(b) != fixed {
		t.Fatal("the fixed file was rewritten by a read")
	}
}
