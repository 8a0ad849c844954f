package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// Journal limits: jobs.json is written whole again (compacted) once
// Options.MaxRecords records (default DefaultMaxRecords) follow it, or once
// the records together outweigh it and MinCompactBytes, so reading a home
// stays bounded and the cost of compacting, paid once per many writes, is a
// constant share of each.
const (
	DefaultMaxRecords = 1024
	MinCompactBytes   = 1 << 20
)

// JournalFile is the name, inside the home directory, of the journal: the
// records that follow jobs.json, one JSON line each, appended and
// fdatasynced.
const JournalFile = "jobs.journal"

// journal is what this process knows of the records that follow jobs.json:
// the journal file as far as it was read, and how many records follow
// jobs.json (lines of the journal, stale ones included, and record files
// of older builds) and their size.
type journal struct {
	ino      uint64 // the journal's inode; 0: there was none
	off      int64  // the end of the journal's last whole line read or written
	count    int    // the records that follow jobs.json
	files    int    // of which record files (jobs.<generation>.json)
	bytes    int64  // their total size
	baseSize int64  // the size of jobs.json
}

// due reports whether the next write should compact instead of adding a
// record of size n to the at most limit records.
func (j journal) due(n, limit int) bool {
	total := j.bytes + int64(n)
	return j.count+1 > limit || (total > j.baseSize && total > MinCompactBytes)
}

// recordFile is the JSON form of one record: the generation it makes, the
// jobs it changed (whole), and, when the chains or breakers changed, all of
// them.
type recordFile struct {
	Version    int              `json:"version"`
	Generation uint64           `json:"generation"`
	Jobs       []*job.Job       `json:"jobs"`
	ChainsSet  bool             `json:"chains_set,omitempty"`
	Chains     []*chain.Chain   `json:"chains,omitempty"`
	Breakers   []*chain.Breaker `json:"chain_breakers,omitempty"`
}

// JournalPath returns the path of the journal.
func (s *Store) JournalPath() string { return filepath.Join(s.home, JournalFile) }

// recordPath returns the path of the record file of generation gen, as
// builds before the journal wrote them; they are still read.
func recordPath(home string, gen uint64) string {
	return filepath.Join(home, "jobs."+strconv.FormatUint(gen, 10)+".json")
}

// recordGeneration parses a record file's name (false: not a record).
func recordGeneration(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, "jobs.")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ".json")
	if !ok || digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	g, err := strconv.ParseUint(digits, 10, 64)
	return g, err == nil
}

// encodeRecord writes the record of generation gen as one journal line:
// the given job lines and, when chains is not nil (the chains changed), the
// chains tail (possibly empty: none left). JSON encoding escapes every
// newline inside strings, so the line's own is its only one.
func encodeRecord(gen uint64, lines [][]byte, chains []byte) []byte {
	size := 96 + len(chains)
	for _, l := range lines {
		size += len(l) + 1
	}
	buf := make([]byte, 0, size)
	buf = append(buf, `{"version":`...)
	buf = strconv.AppendInt(buf, FormatVersion, 10)
	buf = append(buf, `,"generation":`...)
	buf = strconv.AppendUint(buf, gen, 10)
	buf = append(buf, `,"jobs":[`...)
	for i, l := range lines {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, l...)
	}
	buf = append(buf, ']')
	if chains != nil {
		buf = append(buf, `,"chains_set":true`...)
		buf = append(buf, chains...)
	}
	return append(buf, "}\n"...)
}

// decodeRecord checks and decodes one record: a journal line or a record
// file's content.
func decodeRecord(raw []byte) (*recordFile, error) {
	if err := checkText(raw); err != nil {
		return nil, err
	}
	var rec recordFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&rec); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the record")
	}
	if rec.Version == 0 {
		return nil, errors.New("missing version")
	}
	if rec.Generation == 0 {
		return nil, errors.New("missing generation")
	}
	seen := make(map[string]bool, len(rec.Jobs))
	for i, j := range rec.Jobs {
		if j == nil {
			return nil, fmt.Errorf("job %d is null", i)
		}
		if seen[j.ID] {
			return nil, fmt.Errorf("job id %q appears twice", j.ID)
		}
		seen[j.ID] = true
	}
	return &rec, nil
}

// apply applies rec, which makes the generation after st's, to st, keeping
// enc (when not nil) the encoding of each job. It reports whether it added
// jobs (st then needs sorting).
func apply(st *State, enc map[*job.Job][]byte, rec *recordFile) (bool, error) {
	added := false
	if rec.ChainsSet {
		if err := st.chains.load(rec.Chains, rec.Breakers); err != nil {
			return false, err
		}
	}
	for _, nj := range rec.Jobs {
		if i, ok := st.index[nj.ID]; ok {
			delete(enc, st.jobs[i])
			st.jobs[i] = nj
		} else {
			st.jobs = append(st.jobs, nj)
			st.index[nj.ID] = len(st.jobs) - 1
			added = true
		}
		if enc != nil {
			line, err := json.Marshal(nj)
			if err != nil {
				return false, fmt.Errorf("store: encode job %s: %w", nj.ID, err)
			}
			enc[nj] = line
		}
	}
	st.Generation = rec.Generation
	return added, nil
}

// errJournalReplaced says the journal is not the file this process read
// last (it was removed or cut short behind jobs.json's back): the state
// must be read again from jobs.json.
var errJournalReplaced = errors.New("store: the journal was replaced")

// sortJobs puts st's jobs back in order of id after records added some.
func sortJobs(st *State) {
	sort.Slice(st.jobs, func(a, b int) bool { return st.jobs[a].ID < st.jobs[b].ID })
	st.reindex()
}

// replayFiles applies the record files (jobs.<generation>.json) that
// follow st's generation, up to the first missing one.
func (s *Store) replayFiles(st *State, enc map[*job.Job][]byte, j *journal) (bool, error) {
	added := false
	for {
		path := recordPath(s.home, st.Generation+1)
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return added, nil
		}
		if err != nil {
			return added, fmt.Errorf("store: read %s: %w", path, err)
		}
		rec, err := decodeRecord(raw)
		if err == nil && rec.Generation != st.Generation+1 {
			err = fmt.Errorf("record says generation %d, its name %d", rec.Generation, st.Generation+1)
		}
		if err != nil {
			return added, s.aside.corrupt(path, raw, err)
		}
		if rec.Version > FormatVersion {
			return added, fmt.Errorf("store: %s has format version %d, this build reads up to %d", path, rec.Version, FormatVersion)
		}
		a, err := apply(st, enc, rec)
		if err != nil {
			return added, s.aside.corrupt(path, raw, err)
		}
		added = added || a
		j.count++
		j.files++
		j.bytes += int64(len(raw))
	}
}

// replayJournal applies the journal's whole lines after j.off, keeping enc
// (when not nil) the encoding of each job and j what was read. Lines no
// newer than st are stale (written before jobs.json was) and skipped. A
// last line without its newline is what a write cut short by a crash left:
// it is no record, and the next write replaces it.
func (s *Store) replayJournal(st *State, enc map[*job.Job][]byte, j *journal) (bool, error) {
	f, fi, err := s.jfile.open(openToRead)
	if err != nil {
		return false, err
	}
	if f == nil {
		if j.ino != 0 {
			return false, errJournalReplaced
		}
		return false, nil
	}
	ino := inode(fi)
	if j.ino != 0 && (ino != j.ino || fi.Size() < j.off) {
		return false, errJournalReplaced
	}
	j.ino = ino
	if fi.Size() == j.off {
		return false, nil
	}
	buf := make([]byte, fi.Size()-j.off)
	n, err := f.ReadAt(buf, j.off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("store: read %s: %w", s.JournalPath(), err)
	}
	buf = buf[:n]
	added := false
	for {
		nl := bytes.IndexByte(buf, '\n')
		if nl < 0 {
			return added, nil
		}
		line := buf[:nl+1]
		buf = buf[nl+1:]
		a, err := s.applyLine(st, enc, line)
		if err != nil {
			return added, err
		}
		added = added || a
		j.count++
		j.bytes += int64(len(line))
		j.off += int64(len(line))
	}
}

// applyLine applies one journal line to st unless it is stale.
func (s *Store) applyLine(st *State, enc map[*job.Job][]byte, line []byte) (bool, error) {
	rec, err := decodeRecord(line)
	if err == nil && rec.Generation > st.Generation+1 {
		err = fmt.Errorf("a record of generation %d follows generation %d", rec.Generation, st.Generation)
	}
	if err != nil {
		return false, s.aside.corruptJournal(s.JournalPath(), err)
	}
	if rec.Generation <= st.Generation {
		return false, nil
	}
	if rec.Version > FormatVersion {
		return false, fmt.Errorf("store: %s holds format version %d, this build reads up to %d", s.JournalPath(), rec.Version, FormatVersion)
	}
	a, err := apply(st, enc, rec)
	if err != nil {
		return false, s.aside.corruptJournal(s.JournalPath(), err)
	}
	return a, nil
}

// appendRecord appends rec to the journal, where the state read under the
// exclusive lock ended (dropping the remains of a write cut short), and
// makes it durable. On an error the journal is cut back to where it was.
func (s *Store) appendRecord(rec []byte) error {
	f, fi, err := s.jfile.open(openToAppend)
	if err != nil {
		return err
	}
	if !s.jfile.appendable {
		return fmt.Errorf("store: %s is read-only", s.JournalPath())
	}
	at := s.journal.off
	if s.journal.ino != inode(fi) {
		at = 0 // created now: nothing was read from it
	}
	if fi.Size() != at {
		if err := f.Truncate(at); err != nil {
			return fmt.Errorf("store: drop the torn end of %s: %w", s.JournalPath(), err)
		}
	}
	if err := s.opts.Append(f, rec); err != nil {
		if terr := f.Truncate(at); terr != nil {
			return fmt.Errorf("store: append to %s: %w (cutting it back failed too: %w)", s.JournalPath(), err, terr)
		}
		return fmt.Errorf("store: append to %s: %w", s.JournalPath(), err)
	}
	s.journal.ino = inode(fi)
	s.journal.off = at + int64(len(rec))
	return nil
}

// AppendSync is the default Options.Append: it writes data at the end of
// f and waits until it is on disk (fdatasync).
func AppendSync(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	return atomicfile.DataSync(f)
}

// pruneRecords removes the record files that jobs.json of generation gen
// now holds.
func pruneRecords(home string, gen uint64) {
	ents, err := os.ReadDir(home)
	if err != nil {
		return
	}
	for _, e := range ents {
		if g, ok := recordGeneration(e.Name()); ok && g <= gen {
			_ = os.Remove(filepath.Join(home, e.Name()))
		}
	}
}

func inode(fi fs.FileInfo) uint64 {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Ino)
	}
	return 0
}
