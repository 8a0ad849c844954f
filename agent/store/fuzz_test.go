package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/chronoscron/chronos/agent/job"
)

// FuzzRead: whatever jobs.json holds, reading it never panics, and a file
// that cannot be read as jobs is left exactly as it was.
func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"version":1,"generation":3,"jobs":[` + "\n" + `{"id":"a","schedule":"@daily","enabled":true}` + "\n]}\n"))
	f.Add([]byte(`{"version":1,"jobs":[{"id":"a"},{"id":"a"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"jobs":[null]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte("{\"version\":1,\"jobs\":[{\"id\":\"a\",\"name\":\"\xff\"}]}"))
	f.Add([]byte(`{"version":1,"jobs":[{"id":"a","name":"\ud800\u0041"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		home := t.TempDir()
		path := filepath.Join(home, JobsFile)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(home, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		err = s.Update(context.Background(), func(st *State) error {
			return st.Add(&job.Job{ID: "fuzz-new"})
		})
		if (err == nil || errors.Is(err, ErrExists)) && checkText(data) != nil {
			t.Fatalf("text JSON would change was accepted: %v", checkText(data))
		}
		if err != nil && !errors.Is(err, ErrExists) {
			if b, _ := os.ReadFile(path); !bytes.Equal(b, data) {
				t.Fatalf("unreadable file changed (%v)", err)
			}
		}
	})
}

func FuzzParseOwner(f *testing.F) {
	f.Add("host:12:abc")
	f.Add("a:b:c:1:x")
	f.Add(":::")
	f.Fuzz(func(t *testing.T, s string) {
		o, err := job.ParseOwner(s)
		if err != nil {
			return
		}
		if o.PID <= 0 {
			t.Fatalf("pid %d from %q", o.PID, s)
		}
		if back, err := job.ParseOwner(o.String()); err != nil || back != o {
			t.Fatalf("round trip %q -> %+v -> %+v %v", s, o, back, err)
		}
	})
}
