package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/internal/procfs"
	"github.com/chronoscron/chronos/internal/atomicfile"
	"github.com/chronoscron/chronos/internal/filelock"
)

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
func removeLeftovers(home string) {
	names, _ := filepath.Glob(filepath.Join(home, compactPrefix+"*"))
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
	removeLeftovers(s.home)
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
		pruneRecords(s.home, snap.gen)
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
	f, fi, err := s.jfile.open(openToRead)
	if err != nil || f == nil || snap.journal.off == 0 || inode(fi) != snap.journal.ino || fi.Size() < snap.journal.off {
		return 0, 0
	}
	cut := snap.journal.off
	if fi.Size() == cut {
		if !s.jfile.appendable || f.Truncate(0) != nil {
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
