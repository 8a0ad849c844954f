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
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/internal/procfs"
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

// journal is what this process knows of the records that follow jobs.json.
type journal struct {
	count    int   // records applied on top of jobs.json
	bytes    int64 // their total size
	baseSize int64 // the size of jobs.json
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
	Jobs       []*Job           `json:"jobs"`
	ChainsSet  bool             `json:"chains_set,omitempty"`
	Chains     []*chain.Chain   `json:"chains,omitempty"`
	Breakers   []*chain.Breaker `json:"chain_breakers,omitempty"`
}

// RecordPath returns the path of the record that makes generation gen.
func (s *Store) RecordPath(gen uint64) string {
	return filepath.Join(s.home, recordName(gen))
}

func recordName(gen uint64) string { return "jobs." + strconv.FormatUint(gen, 10) + ".json" }

// recordGeneration parses a record's file name ("" prefix/suffix mismatch:
// not a record).
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

// encodeRecord writes the record of generation gen: the given job lines,
// one per line as in jobs.json, and, when chains is not nil (the chains
// changed), the chains tail (possibly empty: none left).
func encodeRecord(gen uint64, lines [][]byte, chains []byte) []byte {
	size := 96 + len(chains)
	for _, l := range lines {
		size += len(l) + 2
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	fmt.Fprintf(buf, "{\"version\":%d,\"generation\":%d,\"jobs\":[", FormatVersion, gen)
	for i, l := range lines {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
		buf.Write(l)
	}
	buf.WriteString("\n]")
	if chains != nil {
		buf.WriteString(`,"chains_set":true`)
		buf.Write(chains)
	}
	buf.WriteString("}\n")
	return buf.Bytes()
}

// decodeRecord checks and decodes the record read from the file of
// generation gen.
func decodeRecord(raw []byte, gen uint64) (*recordFile, error) {
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
	if rec.Generation != gen {
		return nil, fmt.Errorf("record says generation %d, its name %d", rec.Generation, gen)
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

// replay applies to st, in order, every record that follows its generation,
// keeping enc (when not nil) the encoding of each job and j the count and
// size of the records applied. A missing record ends the journal.
func (s *Store) replay(st *State, enc map[*Job][]byte, j *journal) error {
	added := false
	for {
		path := s.RecordPath(st.Generation + 1)
		raw, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("store: read %s: %w", path, err)
		}
		rec, err := decodeRecord(raw, st.Generation+1)
		if err != nil {
			return s.corrupt(path, raw, err)
		}
		if rec.Version > FormatVersion {
			return fmt.Errorf("store: %s has format version %d, this build reads up to %d", path, rec.Version, FormatVersion)
		}
		if rec.ChainsSet {
			if err := st.chains.load(rec.Chains, rec.Breakers); err != nil {
				return s.corrupt(path, raw, err)
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
					return fmt.Errorf("store: encode job %s: %w", nj.ID, err)
				}
				enc[nj] = line
			}
		}
		st.Generation = rec.Generation
		j.count++
		j.bytes += int64(len(raw))
	}
	if added {
		sort.Slice(st.jobs, func(a, b int) bool { return st.jobs[a].ID < st.jobs[b].ID })
		st.reindex()
	}
	return nil
}

// pruneRecords removes the records that jobs.json of generation gen now
// holds. A record left behind (a crash, a failed removal) is harmless:
// readers start after jobs.json's generation.
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

// CompactEvery is how often an agent folds the records written since into
// jobs.json (Compact), so that jobs.json lags the store by about this much.
const CompactEvery = time.Second

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
// gen, read on top of the jobs.json whose fingerprint is baseFP.
type snapshot struct {
	data   []byte
	gen    uint64
	from   uint64 // the generation of the jobs.json it replaces
	baseFP Fingerprint
	bytes  int64 // the size of the records it holds
}

// Compact writes jobs.json whole again when records follow it, and removes
// them. The lock is held only to take the state (shared) and to rename the
// new file into place (exclusive): the file is written and synced in
// between, so changes are not held up by it; records written meanwhile
// follow the new jobs.json as they followed the old. A jobs.json replaced
// meanwhile by another process makes it give up (nothing is lost: the
// records stay). It is a no-op when no record follows jobs.json.
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
	fp, err := s.baseFingerprint()
	gen, ok := readGeneration(s.Path())
	if err != nil || fp != snap.baseFP || !ok || gen != snap.from {
		s.release()
		return nil // another process rewrote jobs.json first
	}
	if err := os.Rename(side, s.Path()); err != nil {
		s.release()
		return fmt.Errorf("store: %w: %w", ErrUnwritable, err)
	}
	derr := atomicfile.SyncDir(s.home)
	if s.cache != nil && s.baseFP == snap.baseFP && s.cache.Generation >= snap.gen {
		if nfp, err := s.baseFingerprint(); err == nil {
			s.baseFP, s.baseGen = nfp, snap.gen
			s.journal = journal{count: int(s.cache.Generation - snap.gen), bytes: max(0, s.journal.bytes-snap.bytes), baseSize: int64(len(snap.data))}
		} else {
			s.drop()
		}
	} else {
		s.drop()
	}
	if s.cache != nil && s.cache.Generation == snap.gen {
		s.wrote = false
	}
	s.release()
	if derr != nil {
		// The rename may not survive a crash; the records then still
		// follow the old jobs.json, so keep them.
		return fmt.Errorf("store: %w: %w", ErrUnwritable, derr)
	}
	for g := snap.from + 1; g <= snap.gen; g++ {
		_ = os.Remove(s.RecordPath(g))
	}
	return nil
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
	if s.cache != st || s.journal.count == 0 || s.enc == nil {
		return nil, nil
	}
	data, err := encodeBase(st, s.enc)
	if err != nil {
		return nil, err
	}
	return &snapshot{data: data, gen: st.Generation, from: s.baseGen, baseFP: s.baseFP, bytes: s.journal.bytes}, nil
}
