package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// records lists the generations of the records in home's journal (whole
// lines only), in order.
func records(t *testing.T, home string) []uint64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(home, JournalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for len(raw) > 0 {
		line, rest, ok := bytes.Cut(raw, []byte("\n"))
		if !ok {
			break
		}
		rec, err := decodeRecord(line)
		if err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		out = append(out, rec.Generation)
		raw = rest
	}
	return out
}

// journalLines returns the journal's whole lines.
func journalLines(t *testing.T, home string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(home, JournalFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	return lines[:len(lines)-1]
}

// fill adds n jobs in one update.
func fill(t *testing.T, s *Store, n int) {
	t.Helper()
	err := s.Update(context.Background(), func(st *State) error {
		for i := range n {
			if err := st.Add(&job.Job{ID: fmt.Sprintf("job-%05d", i), Schedule: "every 1m", Enabled: true}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// claim claims a slot of job id, as the agent's fire does.
func claim(t *testing.T, s *Store, id string, slot time.Time) job.Claim {
	t.Helper()
	var got job.Claim
	err := s.Update(context.Background(), func(st *State) error {
		j := st.Job(id)
		if j == nil {
			return fmt.Errorf("no job %s", id)
		}
		j.NextRunAt = &slot
		c, ok := j.ClaimSlot(slot, job.Claim{RunID: "run-" + slot.Format("150405"), Slot: slot, Owner: "h:1:u"})
		if !ok {
			return errors.New("slot not claimable")
		}
		next := slot.Add(time.Minute)
		j.NextRunAt = &next
		got = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestClaimAppendsARecordOfItsJobAlone: a change to one job leaves
// jobs.json as it was and appends one line to the journal holding that job
// only, whose size does not depend on how many jobs the store holds;
// another store on the home (another process) reads the change; closing
// the writer folds the journal into jobs.json and empties it.
func TestClaimAppendsARecordOfItsJobAlone(t *testing.T) {
	t.Parallel()
	slot := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	sizes := map[int]int{}
	for _, n := range []int{10, 2000} {
		home := t.TempDir()
		s, err := Open(home, Options{})
		if err != nil {
			t.Fatal(err)
		}
		fill(t, s, n)
		base, err := os.ReadFile(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		c := claim(t, s, "job-00003", slot)
		if after, _ := os.ReadFile(s.Path()); string(after) != string(base) {
			t.Fatalf("%d jobs: a claim rewrote jobs.json", n)
		}
		lines := journalLines(t, home)
		if len(lines) != 1 {
			t.Fatalf("%d jobs: journal %q, want one line", n, lines)
		}
		if strings.Count(lines[0], `"id":`) != 1 || !strings.Contains(lines[0], `"id":"job-00003"`) {
			t.Fatalf("%d jobs: record holds more than the claimed job:\n%s", n, lines[0])
		}
		if gens := records(t, home); len(gens) != 1 || gens[0] != 2 {
			t.Fatalf("%d jobs: records %v, want generation 2", n, gens)
		}
		sizes[n] = len(lines[0])

		other := open(t, home)
		j, err := other.Get(context.Background(), "job-00003")
		if err != nil {
			t.Fatal(err)
		}
		if j.Fence != c.Token || len(j.Claims) != 1 || j.Claims[0].Token != c.Token || !j.NextRunAt.Equal(slot.Add(time.Minute)) {
			t.Fatalf("%d jobs: another store reads %+v, want the claim with token %d", n, j, c.Token)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(s.JournalPath()); err != nil || fi.Size() != 0 {
			t.Fatalf("%d jobs: journal after close: %v, %v; want it empty", n, fi.Size(), err)
		}
		raw, _ := os.ReadFile(filepath.Join(home, JobsFile))
		if !strings.Contains(string(raw), `"fence":1,"claims":[{"run_id":"run-090000"`) {
			t.Fatalf("%d jobs: jobs.json after close lacks the claim", n)
		}
		if j, err := open(t, home).Get(context.Background(), "job-00003"); err != nil || j.Fence != c.Token {
			t.Fatalf("%d jobs: after close: %+v %v", n, j, err)
		}
	}
	if sizes[10] != sizes[2000] {
		t.Fatalf("a claim's record is %d bytes with 10 jobs and %d with 2,000; want the same", sizes[10], sizes[2000])
	}
}

// TestStoresFollowEachOthersRecords: two stores on one home alternate
// changes; each applies the other's records to the state it has cached, and
// fencing tokens never repeat.
func TestStoresFollowEachOthersRecords(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	a, b := open(t, home), open(t, home)
	fill(t, a, 3)
	slot := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	seen := map[uint64]bool{}
	for i := range 10 {
		s := a
		if i%2 == 1 {
			s = b
		}
		c := claim(t, s, "job-00001", slot.Add(time.Duration(i)*time.Minute))
		if seen[c.Token] || c.Token != uint64(i+1) {
			t.Fatalf("claim %d got token %d (seen %v)", i, c.Token, seen)
		}
		seen[c.Token] = true
	}
	for _, s := range []*Store{a, b} {
		j, err := s.Get(context.Background(), "job-00001")
		if err != nil || len(j.Claims) != 10 || j.Fence != 10 {
			t.Fatalf("job %+v %v, want ten claims", j, err)
		}
	}
	if gens := records(t, home); len(gens) != 10 || gens[0] != 2 || gens[9] != 11 {
		t.Fatalf("records %v, want generations 2 to 11", gens)
	}
}

// TestCompaction: once the journal is due, a change rewrites jobs.json and
// empties the journal. Lines left behind by a crash between the two are
// older than jobs.json and skipped; the next record follows them.
func TestCompaction(t *testing.T) {
	t.Parallel()
	const limit = 8
	home := t.TempDir()
	s, err := Open(home, Options{MaxRecords: limit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fill(t, s, 2)
	count := func(n int) {
		t.Helper()
		err := s.Update(context.Background(), func(st *State) error {
			st.Job("job-00000").Repeat.Completed = n
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	count(1)
	stale := journalLines(t, home)[0]
	for i := 2; i <= limit; i++ {
		count(i)
	}
	if n := len(records(t, home)); n != limit {
		t.Fatalf("%d records, want %d before compacting", n, limit)
	}
	if gen, _ := readGeneration(s.Path()); gen != 1 {
		t.Fatalf("jobs.json generation %d before compacting, want 1", gen)
	}
	count(limit + 1)
	if gens := records(t, home); len(gens) != 0 {
		t.Fatalf("records %v left after compacting", gens)
	}
	gen, ok := readGeneration(s.Path())
	if !ok || gen != limit+2 {
		t.Fatalf("jobs.json generation %d, want %d", gen, limit+2)
	}
	// A crash before the journal was emptied: its first line is back,
	// older than jobs.json.
	if err := os.WriteFile(s.JournalPath(), []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := open(t, home).Get(context.Background(), "job-00000")
	if err != nil || j.Repeat.Completed != limit+1 {
		t.Fatalf("completed %d (%v), want %d: a stale record was applied", j.Repeat.Completed, err, limit+1)
	}
	// The next record follows jobs.json's generation and is read.
	count(limit + 2)
	if gens := records(t, home); len(gens) != 2 || gens[0] != 2 || gens[1] != limit+3 {
		t.Fatalf("records %v, want the stale one and the new one", gens)
	}
	if j, err := open(t, home).Get(context.Background(), "job-00000"); err != nil || j.Repeat.Completed != limit+2 {
		t.Fatalf("completed %d (%v), want %d", j.Repeat.Completed, err, limit+2)
	}
}

// TestTornAppendIsDropped: the remains of an append cut short by a crash
// (a last line without its newline) are no record: readers ignore them,
// and the next change writes its record in their place.
func TestTornAppendIsDropped(t *testing.T) {
	t.Parallel()
	for _, torn := range []string{`{"version":1,"generation":3,"jobs":[{"id":"torn-`, "\x00\x00\x00\x00"} {
		home := t.TempDir()
		s := open(t, home)
		fill(t, s, 2)
		slot := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
		claim(t, s, "job-00000", slot)
		f, err := os.OpenFile(s.JournalPath(), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(torn); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if j, err := open(t, home).Get(context.Background(), "job-00000"); err != nil || j.Fence != 1 {
			t.Fatalf("%q: read with a torn end: %+v %v", torn, j, err)
		}
		other := open(t, home)
		claim(t, other, "job-00001", slot)
		lines := journalLines(t, home)
		raw, _ := os.ReadFile(s.JournalPath())
		if len(lines) != 2 || len(raw) != len(lines[0])+len(lines[1]) || strings.Contains(string(raw), torn) {
			t.Fatalf("%q: journal %q, want two whole records", torn, raw)
		}
		for _, st := range []*Store{s, open(t, home)} {
			for _, id := range []string{"job-00000", "job-00001"} {
				if j, err := st.Get(context.Background(), id); err != nil || j.Fence != 1 {
					t.Fatalf("%q: %s: %+v %v", torn, id, j, err)
				}
			}
		}
	}
}

// TestCorruptRecordIsKeptAside: a whole journal line that cannot be
// decoded (or a record file of an older build) stops reads and writes with
// ErrCorrupt, is left in place and copied aside.
func TestCorruptRecordIsKeptAside(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, file, content, want string }{
		{"not json", JournalFile, "{\"version\":1,\"generation\":2,\"jobs\":[{\"id\":\n", "unexpected EOF"},
		{"gap", JournalFile, `{"version":1,"generation":7,"jobs":[]}` + "\n", "generation 7 follows generation 1"},
		{"null job", JournalFile, `{"version":1,"generation":2,"jobs":[null]}` + "\n", "job 0 is null"},
		{"invalid utf-8", JournalFile, "{\"version\":1,\"generation\":2,\"jobs\":[{\"id\":\"job-00000\",\"name\":\"\xff\"}]}\n", "invalid UTF-8"},
		{"no version", JournalFile, `{"generation":2,"jobs":[]}` + "\n", "missing version"},
		{"no generation", JournalFile, `{"version":1,"jobs":[]}` + "\n", "missing generation"},
		{"record file", "jobs.2.json", `{"version":1,"generation":7,"jobs":[]}`, "generation 7"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			fill(t, open(t, home), 1)
			s := open(t, home)
			path := filepath.Join(home, tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			err := s.Update(context.Background(), func(st *State) error {
				st.Job("job-00000").Name = "x"
				return nil
			})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrCorrupt with %q", err, tc.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.content {
				t.Fatal("the corrupt record was changed")
			}
			copies, _ := filepath.Glob(path + ".corrupt-*")
			if len(copies) != 1 {
				t.Fatalf("copies %v, want one", copies)
			}
		})
	}
}

// TestRecordOfNewerVersionIsRefused: a record written by a newer build is
// refused, not rewritten.
func TestRecordOfNewerVersionIsRefused(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	fill(t, open(t, home), 1)
	s := open(t, home)
	line := `{"version":9,"generation":2,"jobs":[]}` + "\n"
	if err := os.WriteFile(s.JournalPath(), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(context.Background()); err == nil || !strings.Contains(err.Error(), "format version 9") {
		t.Fatalf("err %v", err)
	}
	err := s.Update(context.Background(), func(st *State) error { return st.Add(&job.Job{ID: "new"}) })
	if err == nil || !strings.Contains(err.Error(), "format version 9") {
		t.Fatalf("update: %v", err)
	}
	if b, _ := os.ReadFile(s.JournalPath()); string(b) != line {
		t.Fatalf("journal changed: %q", b)
	}
}

// TestFingerprintFollowsRecords: each record changes the fingerprint, an
// update that changes nothing does not.
func TestFingerprintFollowsRecords(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s := open(t, home)
	fill(t, s, 2)
	watcher := open(t, home)
	last, err := watcher.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	slot := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	for i := range 3 {
		claim(t, s, "job-00001", slot.Add(time.Duration(i)*time.Minute))
		fp, err := watcher.Fingerprint()
		if err != nil || fp == last || fp.JournalSize <= last.JournalSize {
			t.Fatalf("claim %d: fingerprint %+v (was %+v) %v", i, fp, last, err)
		}
		last = fp
	}
	if err := s.Update(context.Background(), func(st *State) error { _ = st.Job("job-00000"); return nil }); err != nil {
		t.Fatal(err)
	}
	if fp, _ := watcher.Fingerprint(); fp != last {
		t.Fatal("an update that changed nothing changed the fingerprint")
	}
	if err := s.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fp, _ := watcher.Fingerprint(); fp == last || fp.JournalSize != 0 {
		t.Fatalf("after compacting: fingerprint %+v (was %+v)", fp, last)
	}
}

// TestChainProgressIsARecord: a change to an existing chain (not adding or
// dropping one) is a record carrying the chains, read back by another
// store.
func TestChainProgressIsARecord(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s := open(t, home)
	now := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	err := s.Update(context.Background(), func(st *State) error {
		return st.AddChain(chain.New(chain.StartRequest{ID: "inc", Class: "disk", Stage: "action", Limits: chain.DefaultLimits(), FireAt: now.Add(time.Minute), Now: now}))
	})
	if err != nil {
		t.Fatal(err)
	}
	if gens := records(t, home); len(gens) != 0 {
		t.Fatalf("adding a chain wrote records %v, want jobs.json", gens)
	}
	err = s.Update(context.Background(), func(st *State) error {
		st.Chain("inc").Class = "network"
		st.Breaker("network").NoteSpawn(now)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if gens := records(t, home); len(gens) != 1 {
		t.Fatalf("records %v, want one", gens)
	}
	err = open(t, home).View(context.Background(), func(st *State) error {
		if c := st.Chain("inc"); c == nil || c.Class != "network" || st.LookupBreaker("network") == nil {
			t.Fatalf("chain %+v, breakers %+v", c, st.Breakers())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOldLayoutMigrates: a jobs.json not in the one-job-per-line layout (an
// older or hand-formatted file) is written whole on its first change, and
// the next change is a record.
func TestOldLayoutMigrates(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	old := "{\n  \"version\": 1,\n  \"jobs\": [\n    {\"id\": \"a\", \"schedule\": \"every 1m\", \"enabled\": true}\n  ]\n}\n"
	if err := os.WriteFile(filepath.Join(home, JobsFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s := open(t, home)
	wholeThenRecord(t, s, home)
	raw, _ := os.ReadFile(s.Path())
	if !strings.HasPrefix(string(raw), `{"version":2,"generation":1,"jobs":[`+"\n") {
		t.Fatalf("jobs.json not migrated: %s", raw)
	}
	if j, err := open(t, home).Get(context.Background(), "a"); err != nil || j.Name != "n1" {
		t.Fatalf("job %+v %v", j, err)
	}
}

// TestVersionOneIsRewrittenBeforeAnyRecord: a version 1 jobs.json (as
// builds before the journal wrote it, in the current layout) is rewritten
// whole as version 2 by its first change, with no journal line: a build
// that reads only version 1 refuses the home from then on, and never reads
// a jobs.json behind which the journal holds changes.
func TestVersionOneIsRewrittenBeforeAnyRecord(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s := open(t, home)
	err := s.Update(context.Background(), func(st *State) error {
		return st.Add(&job.Job{ID: "a", Schedule: "every 1m", Enabled: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	v1 := strings.Replace(string(raw), `{"version":2,`, `{"version":1,`, 1)
	if v1 == string(raw) {
		t.Fatalf("jobs.json is not version 2: %s", raw)
	}
	if err := os.WriteFile(s.Path(), []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	wholeThenRecord(t, open(t, home), home)
}

// wholeThenRecord renames job "a" twice through s: the first change must
// write jobs.json whole (no journal line), the second append a record,
// and jobs.json must be of the current version after each.
func wholeThenRecord(t *testing.T, s *Store, home string) {
	t.Helper()
	for i, want := range []int{0, 1} {
		err := s.Update(context.Background(), func(st *State) error {
			st.Job("a").Name = fmt.Sprintf("n%d", i)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if gens := records(t, home); len(gens) != want {
			t.Fatalf("change %d: records %v, want %d", i, gens, want)
		}
		raw, _ := os.ReadFile(s.Path())
		if !strings.HasPrefix(string(raw), fmt.Sprintf(`{"version":%d,`, FormatVersion)) {
			t.Fatalf("change %d: jobs.json %s, want version %d", i, raw, FormatVersion)
		}
	}
}

// TestRecordFilesOfAnOlderBuildAreRead: a home left by a build that wrote
// one file per record (jobs.<generation>.json) is read whole; its first
// change writes jobs.json whole and removes those files, and the change
// after it is a journal line.
func TestRecordFilesOfAnOlderBuildAreRead(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s := open(t, home)
	fill(t, s, 2)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"jobs.2.json": "{\"version\":1,\"generation\":2,\"jobs\":[\n{\"id\":\"job-00000\",\"name\":\"two\",\"schedule\":\"every 1m\",\"enabled\":true}\n]}\n",
		"jobs.3.json": "{\"version\":1,\"generation\":3,\"jobs\":[\n{\"id\":\"job-00001\",\"name\":\"three\",\"schedule\":\"every 1m\",\"enabled\":true}\n]}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(home, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s = open(t, home)
	names := func() map[string]string {
		got := map[string]string{}
		err := s.View(context.Background(), func(st *State) error {
			for _, j := range st.All() {
				got[j.ID] = j.Name
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := names(); got["job-00000"] != "two" || got["job-00001"] != "three" {
		t.Fatalf("names %v, want the record files applied", got)
	}
	rename := func(name string) {
		t.Helper()
		err := s.Update(context.Background(), func(st *State) error {
			st.Job("job-00000").Name = name
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rename("four")
	if gen, _ := readGeneration(s.Path()); gen != 4 {
		t.Fatalf("jobs.json generation %d, want 4", gen)
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(home, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s left: %v", name, err)
		}
	}
	rename("five")
	if gens := records(t, home); len(gens) != 1 || gens[0] != 5 {
		t.Fatalf("records %v, want generation 5", gens)
	}
	if got := names(); got["job-00000"] != "five" || got["job-00001"] != "three" {
		t.Fatalf("names %v", got)
	}
}

// TestFailedRecordWriteChangesNothing: a record that cannot be made
// durable (its bytes written, the sync failing) is cut from the journal
// again: the state stays as it was (ErrUnwritable), for this store and
// another, and the next record follows the last good one.
func TestFailedRecordWriteChangesNothing(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	fill(t, open(t, home), 1)
	fail := errors.New("disk full")
	var failing atomic.Bool
	s, err := Open(home, Options{Append: func(f *os.File, data []byte) error {
		if failing.Load() {
			if _, err := f.Write(data[:len(data)/2]); err != nil {
				return err
			}
			return fail
		}
		return AppendSync(f, data)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rename := func(name string) error {
		return s.Update(context.Background(), func(st *State) error {
			st.Job("job-00000").Name = name
			return nil
		})
	}
	if err := rename("kept"); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(s.JournalPath())
	failing.Store(true)
	err = rename("lost")
	if !errors.Is(err, ErrUnwritable) || !errors.Is(s.WriteError(), ErrUnwritable) || !errors.Is(err, fail) {
		t.Fatalf("err %v, write error %v", err, s.WriteError())
	}
	if after, _ := os.ReadFile(s.JournalPath()); !bytes.Equal(after, before) {
		t.Fatalf("journal %q after a failed append, want %q", after, before)
	}
	for _, st := range []*Store{s, open(t, home)} {
		if j, err := st.Get(context.Background(), "job-00000"); err != nil || j.Name != "kept" {
			t.Fatalf("job %+v %v", j, err)
		}
	}
	failing.Store(false)
	if err := rename("next"); err != nil || s.WriteError() != nil {
		t.Fatalf("rename after: %v, write error %v", err, s.WriteError())
	}
	if gens := records(t, home); len(gens) != 2 || gens[1] != 3 {
		t.Fatalf("records %v, want generations 2 and 3", gens)
	}
	if j, err := open(t, home).Get(context.Background(), "job-00000"); err != nil || j.Name != "next" {
		t.Fatalf("job %+v %v", j, err)
	}
}

func TestRecordGeneration(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]uint64{"jobs.1.json": 1, "jobs.18446744073709551615.json": 1<<64 - 1} {
		if g, ok := recordGeneration(name); !ok || g != want {
			t.Errorf("%s: %d %v", name, g, ok)
		}
	}
	for _, name := range []string{"jobs.json", "jobs..json", "jobs.1.json.corrupt-20260101T000000Z", ".jobs.1.json.tmp-123", "jobs.-1.json", "jobs.1a.json", "jobs.99999999999999999999.json", "jobs.journal"} {
		if _, ok := recordGeneration(name); ok {
			t.Errorf("%s read as a record", name)
		}
	}
}

// TestCompactKeepsWhatIsWrittenMeanwhile: Compact folds the journal into
// jobs.json; a change another process makes while the new file is being
// written stays in the journal after it, alone, and one that rewrites
// jobs.json makes Compact give up. Nothing is lost either way.
func TestCompactKeepsWhatIsWrittenMeanwhile(t *testing.T) {
	t.Parallel()
	for _, meanwhile := range []string{"record", "rewrite"} {
		t.Run(meanwhile, func(t *testing.T) {
			t.Parallel()
			home := t.TempDir()
			other := open(t, home)
			fill(t, other, 3)
			var during func()
			s, err := Open(home, Options{WriteFile: func(path string, data []byte, perm os.FileMode) error {
				if strings.HasPrefix(filepath.Base(path), compactPrefix) && during != nil {
					during()
				}
				return atomicfile.Replace(path, data, perm)
			}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			slot := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
			claim(t, s, "job-00000", slot)
			claim(t, s, "job-00001", slot)
			during = func() {
				if meanwhile == "record" {
					claim(t, other, "job-00002", slot)
					return
				}
				addJob(t, other, "new")
			}
			if err := s.Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			gen, _ := readGeneration(s.Path())
			gens := records(t, home)
			switch meanwhile {
			case "record":
				if gen != 3 || len(gens) != 1 || gens[0] != 4 {
					t.Fatalf("jobs.json generation %d, records %v; want 3 and the record of 4", gen, gens)
				}
			case "rewrite":
				if gen != 4 || len(gens) != 0 {
					t.Fatalf("jobs.json generation %d, records %v; want the other process's 4 and none", gen, gens)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(home, compactPrefix+"*")); len(left) != 0 {
				t.Fatalf("files left: %v", left)
			}
			for _, st := range []*Store{s, other, open(t, home)} {
				for _, id := range []string{"job-00000", "job-00001"} {
					if j, err := st.Get(context.Background(), id); err != nil || j.Fence != 1 {
						t.Fatalf("%s: %+v %v", id, j, err)
					}
				}
				if j, err := st.Get(context.Background(), "job-00002"); meanwhile == "record" && (err != nil || j.Fence != 1) {
					t.Fatalf("the claim made meanwhile: %+v %v", j, err)
				}
			}
			// Both stores go on from where they are.
			claim(t, s, "job-00000", slot.Add(time.Minute))
			claim(t, other, "job-00001", slot.Add(time.Minute))
			for _, st := range []*Store{s, other, open(t, home)} {
				for _, id := range []string{"job-00000", "job-00001"} {
					if j, err := st.Get(context.Background(), id); err != nil || j.Fence != 2 {
						t.Fatalf("after: %s: %+v %v", id, j, err)
					}
				}
			}
			// Nothing to fold: Compact writes nothing.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if err := other.Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			fp, _ := other.Fingerprint()
			if err := other.Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			if fp2, _ := other.Fingerprint(); fp2 != fp {
				t.Fatal("a compaction with no record rewrote jobs.json")
			}
		})
	}
}

// TestCompactIfDue: a journal that grows and is small next to jobs.json is
// left alone; one that stopped growing, or holds half of MaxRecords
// records, is folded.
func TestCompactIfDue(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	s, err := Open(home, Options{MaxRecords: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	fill(t, s, 200)
	slot := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	due := func(want bool) {
		t.Helper()
		before := len(records(t, home))
		if err := s.CompactIfDue(context.Background()); err != nil {
			t.Fatal(err)
		}
		if folded := before > 0 && len(records(t, home)) == 0; folded != want {
			t.Fatalf("folded %v with %d records, want %v", folded, before, want)
		}
	}
	due(false) // nothing to fold
	for i := range 19 {
		claim(t, s, fmt.Sprintf("job-%05d", i), slot)
		due(false) // growing, short
	}
	due(true) // at rest
	for i := range 20 {
		claim(t, s, fmt.Sprintf("job-%05d", 100+i), slot)
	}
	due(true) // half of MaxRecords
}
