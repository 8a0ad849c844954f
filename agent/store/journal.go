package store

import (
	"bytes"
	"context"
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
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/atomicfile"
	"github.com/chronoscron/chronos/internal/filelock"
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
func (s *Store) recordPath(gen uint64) string {
	return filepath.Join(s.home, "jobs."+strconv.FormatUint(gen, 10)+".json")
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
		path := s.recordPath(st.Generation + 1)
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
			return added, s.corrupt(path, raw, err)
		}
		if rec.Version > FormatVersion {
			return added, fmt.Errorf("store: %s has format version %d, this build reads up to %d", path, rec.Version, FormatVersion)
		}
		a, err := apply(st, enc, rec)
		if err != nil {
			return added, s.corrupt(path, raw, err)
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
	f, fi, err := s.journalFile(openToRead)
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
		return false, s.corruptJournal(err)
	}
	if rec.Generation <= st.Generation {
		return false, nil
	}
	if rec.Version > FormatVersion {
		return false, fmt.Errorf("store: %s holds format version %d, this build reads up to %d", s.JournalPath(), rec.Version, FormatVersion)
	}
	a, err := apply(st, enc, rec)
	if err != nil {
		return false, s.corruptJournal(err)
	}
	return a, nil
}

// corruptJournal keeps a copy of the journal whose line could not be
// decoded and returns ErrCorrupt.
func (s *Store) corruptJournal(cause error) error {
	raw, err := os.ReadFile(s.JournalPath())
	if err != nil {
		return fmt.Errorf("store: %w: %s: %w (left untouched; reading it to copy it aside failed: %w)", ErrCorrupt, s.JournalPath(), cause, err)
	}
	return s.corrupt(s.JournalPath(), raw, cause)
}

// openMode says whether journalFile may create the journal.
type openMode int

const (
	openToRead openMode = iota
	openToAppend
)

// journalFile returns the journal, opened for appending when it can be
// (read-only otherwise), and its current size; a journal that does not
// exist is nil unless m is openToAppend, which creates it (and makes its
// name durable). The file stays open for the next calls while it is the
// one at the journal's path.
func (s *Store) journalFile(m openMode) (*os.File, fs.FileInfo, error) {
	path := s.JournalPath()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) && m == openToRead {
		return nil, nil, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if err == nil && s.jf != nil && s.jfIno == inode(fi) && (m == openToRead || s.jfAppend) {
		return s.jf, fi, nil
	}
	if s.jf != nil {
		_ = s.jf.Close()
		s.jf = nil
	}
	created := err != nil
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	appendable := err == nil
	if err != nil && m == openToRead {
		f, err = os.Open(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if fi, err = f.Stat(); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if created {
		if err := atomicfile.SyncDir(s.home); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("store: create %s: %w", path, err)
		}
	}
	s.jf, s.jfIno, s.jfAppend = f, inode(fi), appendable
	return f, fi, nil
}

// appendRecord appends rec to the journal, where the state read under the
// exclusive lock ended (dropping the remains of a write cut short), and
// makes it durable. On an error the journal is cut back to where it was.
func (s *Store) appendRecord(rec []byte) error {
	f, fi, err := s.journalFile(openToAppend)
	if err != nil {
		return err
	}
	if !s.jfAppend {
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

// resetJournal empties the journal once jobs.json holds all it records;
// it runs under the exclusive lock, after jobs.json was made durable, and
// returns what is then known of the journal. A journal that cannot be
// emptied keeps its lines, stale now: the next read skips them.
func (s *Store) resetJournal() journal {
	f, fi, err := s.journalFile(openToRead)
	if err != nil || f == nil {
		return journal{}
	}
	if fi.Size() > 0 && (!s.jfAppend || f.Truncate(0) != nil) {
		return journal{}
	}
	return journal{ino: inode(fi)}
}

// pruneRecords removes the record files that jobs.json of generation gen
// now holds.
func (s *Store) pruneRecords(gen uint64) {
	ents, err := os.ReadDir(s.home)
	if err != nil {
		return
	}
	for _, e := range ents {
		if g, ok := recordGeneration(e.Name()); ok && g <= gen {
			_ = os.Remove(filepath.Join(s.home, e.Name()))
		}
	}
}

func inode(fi fs.FileInfo) uint64 {
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Ino)
	}
	return 0
}

// CompactEvery is how often an agent asks CompactIfDue to fold the journal
// into jobs.json.
const CompactEvery = time.Second

// CompactIfDue compacts (Compact) when the journal, as this store last
// read it, is worth folding: it holds half of Options.MaxRecords records,
// or a quarter of jobs.json's size, or it has not grown since the last
// call (the store is at rest). Under a steady stream of claims jobs.json is
// so rewritten once per many records, at a cost per record that does not
// grow with the number of jobs, and the journal never reaches the length
// at which a change must rewrite jobs.json under the lock.
func (s *Store) CompactIfDue(ctx context.Context) error {
	s.mu.Lock()
	j := s.journal
	at := journalMark{ino: j.ino, off: j.off}
	rest := at == s.lastMark
	s.lastMark = at
	s.mu.Unlock()
	if j.count == 0 || !(rest || 2*j.count >= s.opts.MaxRecords || 4*j.bytes >= j.baseSize) {
		return nil
	}
	return s.Compact(ctx)
}

// journalMark is how far the journal was read.
type journalMark struct {
	ino uint64
	off int64
}

// compactPrefix starts the name of the file (one per process and
// compaction: .jobs.json.compact-<pid>-<nanoseconds>) where Compact writes
// the new jobs.json before renaming it into place.
const compactPrefix = ".jobs.json.compact-"

// removeLeftovers removes the files a compaction left when its process
// died before renaming them into place.
func (s *Store) removeLeftovers() {
	names, _ := filepath.Glob(filepath.Join(s.home, compactPrefix+"*"))
	for _, p := range names {
		pid, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(p), compactPrefix), "-")
		if n, err := strconv.Atoi(pid); ok && err == nil && n != os.Getpid() && !procfs.Alive(n) {
			_ = os.Remove(p)
		}
	}
}

// snapshot is jobs.json as Compact will write it: the state at generation
// gen, read on top of the jobs.json whose fingerprint is baseFP, and the
// journal as far as that state was read from it.
type snapshot struct {
	data    []byte
	gen     uint64
	from    uint64 // the generation of the jobs.json it replaces
	baseFP  Fingerprint
	journal journal
}

// Compact writes jobs.json whole again when records follow it, and drops
// them from the journal. The lock is held only to take the state (shared)
// and to rename the new file into place (exclusive): the file is written
// and synced in between, so changes are not held up by it; records
// written meanwhile stay in the journal, after the new jobs.json as they
// followed the old. A jobs.json replaced meanwhile by another process
// makes it give up (nothing is lost: the records stay). It is a no-op when
// no record follows jobs.json.
func (s *Store) Compact(ctx context.Context) error {
	snap, err := s.snapshot(ctx)
	if err != nil || snap == nil {
		return err
	}
	s.removeLeftovers()
	side := filepath.Join(s.home, fmt.Sprintf("%s%d-%d", compactPrefix, os.Getpid(), time.Now().UnixNano()))
	if err := s.opts.WriteFile(side, snap.data, 0o600); err != nil {
		return fmt.Errorf("store: %w: %w", ErrUnwritable, err)
	}
	defer os.Remove(side)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.acquire(ctx, filelock.Exclusive); err != nil {
		return err
	}
	defer s.release()
	fp, err := s.baseFingerprint()
	gen, ok := readGeneration(s.Path())
	if err != nil || fp != snap.baseFP || !ok || gen != snap.from {
		return nil // another process rewrote jobs.json first
	}
	if err := os.Rename(side, s.Path()); err != nil {
		return fmt.Errorf("store: %w: %w", ErrUnwritable, err)
	}
	if err := atomicfile.SyncDir(s.home); err != nil {
		// The rename may not survive a crash; the records then still
		// follow the old jobs.json, so keep them.
		s.drop()
		return fmt.Errorf("store: %w: %w", ErrUnwritable, err)
	}
	if snap.journal.files > 0 {
		s.pruneRecords(snap.gen)
	}
	cut, ino := s.fold(snap)
	s.afterCompact(snap, cut, ino)
	return nil
}

// fold drops from the journal the lines that jobs.json, now of generation
// snap.gen, holds: it empties the journal or, when lines were added after
// the snapshot, replaces it with a file of those lines alone. It returns
// how many bytes were dropped from the journal's start (0: none, the
// journal is left as it was) and the journal's inode now. It runs under
// the exclusive lock. A journal it cannot shorten keeps its lines, which
// readers skip as stale.
func (s *Store) fold(snap *snapshot) (int64, uint64) {
	f, fi, err := s.journalFile(openToRead)
	if err != nil || f == nil || snap.journal.off == 0 || inode(fi) != snap.journal.ino || fi.Size() < snap.journal.off {
		return 0, 0
	}
	cut := snap.journal.off
	if fi.Size() == cut {
		if !s.jfAppend || f.Truncate(0) != nil {
			return 0, 0
		}
		return cut, inode(fi)
	}
	tail := make([]byte, fi.Size()-cut)
	if _, err := f.ReadAt(tail, cut); err != nil {
		return 0, 0
	}
	if err := s.opts.WriteFile(s.JournalPath(), tail, 0o600); err != nil {
		return 0, 0
	}
	nfi, err := os.Stat(s.JournalPath())
	if err != nil {
		s.drop()
		return 0, 0
	}
	return cut, inode(nfi)
}

// afterCompact keeps the cached state, now on top of the new jobs.json
// and the journal cut by cut bytes (now inode ino), when it is still the
// one the snapshot was taken from or a later one; it drops it otherwise.
func (s *Store) afterCompact(snap *snapshot, cut int64, ino uint64) {
	if s.cache == nil || s.baseFP != snap.baseFP || s.cache.Generation < snap.gen || snap.journal.files > 0 {
		s.drop()
		return
	}
	nfp, err := s.baseFingerprint()
	if err != nil {
		s.drop()
		return
	}
	j := s.journal
	j.baseSize = int64(len(snap.data))
	if cut > 0 {
		if j.ino != snap.journal.ino || j.off < cut {
			s.drop()
			return
		}
		j.ino, j.off = ino, j.off-cut
		j.bytes -= cut
		j.count -= snap.journal.count
	}
	s.baseFP, s.baseGen, s.journal = nfp, snap.gen, j
	if s.cache.Generation == snap.gen {
		s.wrote = false
	}
}

// snapshot reads the current state under the shared lock and encodes it as
// jobs.json; nil when no record follows jobs.json.
func (s *Store) snapshot(ctx context.Context) (*snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.acquire(ctx, filelock.Shared); err != nil {
		return nil, err
	}
	defer s.release()
	st, err := s.read()
	if err != nil {
		return nil, err
	}
	if s.cache != st || st.Generation == s.baseGen || s.enc == nil {
		return nil, nil
	}
	data, err := encodeBase(st, s.enc)
	if err != nil {
		return nil, err
	}
	return &snapshot{data: data, gen: st.Generation, from: s.baseGen, baseFP: s.baseFP, journal: s.journal}, nil
}
