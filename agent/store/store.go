package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/atomicfile"
	"github.com/chronoscron/chronos/internal/filelock"
)

// File names inside the home directory.
const (
	JobsFile = "jobs.json"
	LockFile = "jobs.lock"
)

// Errors of the store.
var (
	// ErrNotFound is returned for an unknown job id.
	ErrNotFound = errors.New("job not found")
	// ErrExists is returned when adding a job whose id is taken.
	ErrExists = errors.New("job already exists")
	// ErrCorrupt is returned when jobs.json cannot be decoded; the file is
	// left in place and a copy kept aside.
	ErrCorrupt = errors.New("jobs file is corrupt")
	// ErrLockTimeout is returned when the lock could not be taken in time.
	ErrLockTimeout = errors.New("store lock busy")
	// ErrUnwritable is wrapped by the error of an Update whose change could
	// not be written (a full disk, a read-only home); see WriteError.
	ErrUnwritable = errors.New("not writable")
)

// Options tune a store. The zero value is usable.
type Options struct {
	// LockTimeout bounds how long Update and View wait for the lock when the
	// context has no earlier deadline (default 5 s).
	LockTimeout time.Duration
	// Now is the clock used to name corrupt copies (default time.Now).
	Now func() time.Time
	// WriteFile replaces a file whole, so that a crash leaves the old
	// content or the new, never a part (default atomicfile.Replace: temp
	// file, fsync, rename, directory fsync). Tests pass one that fails.
	WriteFile func(path string, data []byte, perm fs.FileMode) error
	// Append adds data at the end of the journal f and makes it durable
	// (default AppendSync: write, fdatasync). On an error the store cuts
	// the journal back to where it was. Tests pass one that fails.
	Append func(f *os.File, data []byte) error
	// MaxRecords is how many records may follow jobs.json before a change
	// writes it whole again (default DefaultMaxRecords).
	MaxRecords int
	// MaxFile caps jobs.json: a larger file is refused before it is read
	// (default DefaultMaxFileBytes; its Setting is named in the error).
	MaxFile Limit
	// Logger receives the warnings of a jobs.json that turned bad while
	// the last good jobs were held (default: discarded).
	Logger *slog.Logger
}

// Store is the job store of one home directory. It is safe for concurrent use
// by goroutines, and by processes sharing the directory.
type Store struct {
	home string
	opts Options

	mu   sync.Mutex // serialises this process's users of the lock fd
	lock *os.File

	// The journal, kept open while it is the file at its path.
	jf       *os.File
	jfIno    uint64
	jfAppend bool // jf was opened for appending

	// The last version read or written by this process, reused while
	// jobs.json on disk is provably the same (same fingerprint and
	// generation) and no record follows the cached generation.
	cache   *State
	baseFP  Fingerprint         // jobs.json's fingerprint (Generation zero)
	baseGen uint64              // the generation jobs.json itself holds
	enc     map[*job.Job][]byte // each cached job's line in the file
	journal journal             // the records applied on top of jobs.json
	wrote   bool                // this store added a record since jobs.json was written

	lastMark journalMark // the journal as CompactIfDue saw it last

	werr atomic.Pointer[writeErr] // the last write's failure; nil: it succeeded

	// last holds the last good jobs while jobs.json on disk is bad; nil
	// while jobs.json reads.
	last   *lastGood
	warned string // the bad content last warned of

	health atomic.Pointer[health] // what Health found last
}

type writeErr struct{ err error }

// Open opens (creating if needed) the store in home.
func Open(home string, opts Options) (*Store, error) {
	if home == "" {
		return nil, errors.New("store: home directory is empty")
	}
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 5 * time.Second
	}
	if opts.WriteFile == nil {
		opts.WriteFile = atomicfile.Replace
	}
	if opts.Append == nil {
		opts.Append = AppendSync
	}
	if opts.MaxRecords <= 0 {
		opts.MaxRecords = DefaultMaxRecords
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxFile.Bytes <= 0 {
		opts.MaxFile.Bytes = DefaultMaxFileBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("store: create home: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(home, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		// A read-only home can still be read under the lock: flock needs no
		// write access to the file.
		ro, rerr := os.Open(filepath.Join(home, LockFile))
		if rerr != nil {
			return nil, fmt.Errorf("store: open lock file: %w", err)
		}
		lf = ro
	}
	return &Store{home: home, opts: opts, lock: lf}, nil
}

// Home returns the home directory.
func (s *Store) Home() string { return s.home }

// Path returns the path of jobs.json.
func (s *Store) Path() string { return filepath.Join(s.home, JobsFile) }

// WriteError returns why the last write (of jobs.json or a record) by this
// store failed, or nil when it succeeded or none was tried yet. A callback
// that changes nothing writes nothing and leaves it as it was.
func (s *Store) WriteError() error {
	if w := s.werr.Load(); w != nil {
		return w.err
	}
	return nil
}

// Close releases the lock file. A store that added records to the journal
// first writes jobs.json whole again, so that a home no process holds open
// keeps its whole state in jobs.json; if that fails (the lock is busy, the
// disk is full) the records stay and are read as before.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lock == nil {
		return nil
	}
	if s.wrote {
		s.compactLocked()
	}
	if s.jf != nil {
		_ = s.jf.Close()
		s.jf = nil
	}
	err := s.lock.Close()
	s.lock = nil
	return err
}

// acquire takes the lock file (filelock.Shared or Exclusive) until ctx or
// the lock timeout ends. The caller holds s.mu.
func (s *Store) acquire(ctx context.Context, m filelock.Mode) error {
	if s.lock == nil {
		return errors.New("store: closed")
	}
	err := filelock.Acquire(ctx, s.lock, m, s.opts.LockTimeout)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, filelock.ErrTimeout), ctx.Err() != nil:
		return fmt.Errorf("store: %w: %w", ErrLockTimeout, err)
	}
	return fmt.Errorf("store: %w", err)
}

func (s *Store) release() { filelock.Release(s.lock) }

// View reads the current state under a shared lock. fn must neither keep
// nor change st (the state may be cached for the next call).
func (s *Store) View(ctx context.Context, fn func(st *State) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.acquire(ctx, filelock.Shared); err != nil {
		return err
	}
	defer s.release()
	st, err := s.read()
	if err != nil {
		return err
	}
	defer st.clean()
	return fn(st)
}

// Update applies fn to the current state under the exclusive lock and writes
// the result durably if fn returns nil. An error from fn leaves the file as
// it was and is returned unchanged.
func (s *Store) Update(ctx context.Context, fn func(st *State) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.acquire(ctx, filelock.Exclusive); err != nil {
		return err
	}
	defer s.release()
	st, err := s.read()
	if err != nil {
		return err
	}
	if err := fn(st); err != nil {
		s.drop()
		return err
	}
	if err := s.write(st); err != nil {
		s.drop()
		if errors.Is(err, ErrUnwritable) {
			s.werr.Store(&writeErr{err: err})
		}
		return err
	}
	return nil
}

// compactLocked writes jobs.json whole from the current state, under the
// exclusive lock; s.mu is held. Failures leave the records in place.
func (s *Store) compactLocked() {
	if err := s.acquire(context.Background(), filelock.Exclusive); err != nil {
		return
	}
	defer s.release()
	st, err := s.read()
	if err != nil || st.Generation == s.baseGen {
		s.wrote = false
		return
	}
	enc, _, err := encodeJobs(st, s.enc)
	if err == nil {
		err = s.writeBase(st, enc)
	}
	if err != nil {
		s.drop()
		return
	}
	s.wrote = false
}

// read loads jobs.json and applies the records that follow it; a missing
// file is an empty state. The state of the previous read or write is reused
// when jobs.json is unchanged, with only the records written since applied;
// callers that fail after mutating it must call s.drop. When jobs.json on
// disk turns bad (it does not decode, or it is over Options.MaxFile), the
// last good state is read instead (see lastGood).
func (s *Store) read() (*State, error) {
	if s.last != nil {
		return s.readHeld()
	}
	// The cache is clean here (a caller that failed dropped it): the last
	// good state, should jobs.json turn out bad.
	prev, prevEnc := s.cache, s.enc
	if s.cache != nil {
		fp, err := s.baseFingerprint()
		if err == nil && fp == s.baseFP && fp != (Fingerprint{}) {
			if gen, ok := readGeneration(s.Path()); ok && gen == s.baseGen {
				added, err := s.replayJournal(s.cache, s.enc, &s.journal)
				if err == nil {
					if added {
						sortJobs(s.cache)
					}
					s.cache.clean()
					return s.cache, nil
				}
				s.drop()
				if !errors.Is(err, errJournalReplaced) {
					return nil, err
				}
			}
		}
		s.drop()
	}
	st, err := s.readBase()
	var bad *badFile
	if errors.As(err, &bad) && prev != nil {
		return s.hold(bad, prev, prevEnc)
	}
	return st, err
}

// readBase reads jobs.json from disk, and the records that follow it, and
// caches the result. A jobs.json that cannot be used is a *badFile.
func (s *Store) readBase() (*State, error) {
	f, err := os.Open(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		st := &State{Version: FormatVersion}
		st.reindex()
		s.drop()
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", s.Path(), err)
	}
	var fp Fingerprint
	if fi, err := f.Stat(); err == nil {
		fp = Fingerprint{Ino: inode(fi), Size: fi.Size(), MTime: fi.ModTime().UnixNano()}
	}
	raw, err := ReadLimited(f, s.Path(), s.opts.MaxFile)
	f.Close()
	var tl *TooLargeError
	if errors.As(err, &tl) {
		return nil, &badFile{err: fmt.Errorf("store: %w; left untouched", err), fp: fp,
			reason: fmt.Sprintf("%s is %d bytes, over the limit of %d bytes", JobsFile, tl.Size, tl.Limit.Bytes) + setBy(tl.Limit)}
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", s.Path(), err)
	}
	st, enc, err := parseBase(raw)
	var nf newerFormat
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("store: %s has format version %d, this build reads up to %d", s.Path(), int(nf), FormatVersion)
	}
	if err != nil {
		aside, kerr := s.keepAside(s.Path(), raw)
		return nil, &badFile{err: corruptError(s.Path(), err, aside, kerr), fp: fp, aside: aside,
			reason: fmt.Sprintf("%s does not parse: %v", JobsFile, err)}
	}
	baseGen := st.Generation
	j := journal{baseSize: int64(len(raw))}
	added, err := s.replayFiles(st, enc, &j)
	if err != nil {
		return nil, err
	}
	more, err := s.replayJournal(st, enc, &j)
	if err != nil {
		return nil, err
	}
	if added || more {
		sortJobs(st)
	}
	s.remember(st, enc, baseGen, j)
	return st, nil
}

// newerFormat is the error of parseBase for a file of a newer format
// version than this build reads: not corrupt, and not to be overwritten.
type newerFormat int

func (v newerFormat) Error() string { return fmt.Sprintf("format version %d", int(v)) }

// parseBase decodes and checks raw, the content of jobs.json, and maps each
// job to its line (see splitLines). An error is the reason the content is
// corrupt, or a newerFormat.
func parseBase(raw []byte) (*State, map[*job.Job][]byte, error) {
	if err := checkText(raw); err != nil {
		return nil, nil, err
	}
	var fst fileState
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&fst); err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("trailing data after the jobs object")
	}
	if fst.Version == 0 {
		return nil, nil, errors.New("missing version")
	}
	if fst.Version > FormatVersion {
		return nil, nil, newerFormat(fst.Version)
	}
	seen := make(map[string]bool, len(fst.Jobs))
	for i, j := range fst.Jobs {
		if j == nil {
			return nil, nil, fmt.Errorf("job %d is null", i)
		}
		if seen[j.ID] {
			return nil, nil, fmt.Errorf("job id %q appears twice", j.ID)
		}
		seen[j.ID] = true
	}
	st := &State{Version: fst.Version, Generation: fst.Generation, jobs: fst.Jobs}
	if err := st.chains.load(fst.Chains, fst.Breakers); err != nil {
		return nil, nil, err
	}
	st.reindex()
	return st, splitLines(raw, st.jobs), nil
}

// splitLines maps each job to its line in raw when raw has the layout
// encode writes (a header line, one job per line, a closing line); nil
// otherwise. A line holds a valid encoding of its job, so it can be written
// back unchanged while the job is not touched.
func splitLines(raw []byte, jobs []*job.Job) map[*job.Job][]byte {
	lines := bytes.Split(raw, []byte("\n"))
	if len(lines) != len(jobs)+3 || !bytes.HasSuffix(lines[0], []byte(`"jobs":[`)) || !bytes.HasPrefix(lines[len(lines)-2], []byte("]")) {
		return nil
	}
	enc := make(map[*job.Job][]byte, len(jobs))
	for i, j := range jobs {
		enc[j] = bytes.TrimSuffix(lines[i+1], []byte(","))
	}
	return enc
}

// remember caches st (with each job's encoded line) as the content of
// jobs.json now on disk, which holds generation baseGen, and the records j
// that follow it.
func (s *Store) remember(st *State, enc map[*job.Job][]byte, baseGen uint64, j journal) {
	fp, err := s.baseFingerprint()
	if err != nil {
		s.drop()
		return
	}
	st.clean()
	s.cache, s.baseFP, s.baseGen, s.enc, s.journal = st, fp, baseGen, enc, j
	if s.last == nil {
		s.noteHealth(fp)
	}
}

func (s *Store) drop() {
	s.cache, s.baseFP, s.baseGen, s.enc, s.journal = nil, Fingerprint{}, 0, nil, journal{}
}

// readGeneration reads the generation from the head of the file, where
// encode puts it.
func readGeneration(path string) (uint64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var head [96]byte
	n, _ := io.ReadFull(f, head[:])
	h := string(head[:n])
	const key = `"generation":`
	i := strings.Index(h, key)
	if i < 0 {
		return 0, false
	}
	h = h[i+len(key):]
	end := strings.IndexAny(h, ",}")
	if end < 0 {
		return 0, false
	}
	g, err := strconv.ParseUint(strings.TrimSpace(h[:end]), 10, 64)
	return g, err == nil
}

// corrupt keeps a copy of the undecodable file at path (jobs.json or a
// record) and returns ErrCorrupt. A content already kept aside is not
// copied again; a new content never replaces an older copy, even one named
// for the same second.
func (s *Store) corrupt(path string, raw []byte, cause error) error {
	aside, err := s.keepAside(path, raw)
	return corruptError(path, cause, aside, err)
}

// corruptError is the ErrCorrupt error of the file at path, undecodable
// for cause, whose copy was kept at aside, or not for kerr.
func corruptError(path string, cause error, aside string, kerr error) error {
	if kerr != nil {
		return fmt.Errorf("store: %w: %s: %w (left untouched; copying it aside failed: %w)", ErrCorrupt, path, cause, kerr)
	}
	return fmt.Errorf("store: %w: %s: %w (left untouched; copy kept at %s)", ErrCorrupt, path, cause, aside)
}

// keepAside returns the path of a copy of raw next to path, writing one
// unless an earlier copy holds the same bytes.
func (s *Store) keepAside(path string, raw []byte) (string, error) {
	prefix := path + ".corrupt-"
	if old, err := filepath.Glob(prefix + "*"); err == nil {
		for _, p := range old {
			if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, raw) {
				return p, nil
			}
		}
	}
	base := prefix + s.opts.Now().UTC().Format("20060102T150405Z")
	for i := 1; i <= 1000; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		err := atomicfile.Create(name, raw, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("too many copies named %s-*", base)
}

// write makes st durable. Only jobs the callback touched are encoded
// again; if none changed, nothing is written. A change that adds or removes
// jobs, or that comes when the journal is due, rewrites jobs.json whole;
// any other adds one record holding only the jobs (and chains) it changed,
// so its cost does not grow with the number of jobs.
func (s *Store) write(st *State) error {
	// A jobs.json of an older format is rewritten before any record is
	// appended: builds that predate the journal refuse the newer version
	// instead of reading jobs.json without the journal's records.
	older := st.Version < FormatVersion
	st.Version = FormatVersion
	if st.reshaped {
		sortJobs(st)
	}
	old := s.enc
	if s.cache != st {
		old = nil
	}
	enc, lines, err := encodeJobs(st, old)
	if err != nil {
		return err
	}
	tail, tailChanged, err := st.chains.tail()
	if err != nil {
		return err
	}
	if !st.reshaped && old != nil && !tailChanged && len(lines) == 0 {
		st.clean()
		return nil
	}
	st.Generation++
	// A jobs.json held bad is replaced whole (see lastGood).
	if st.reshaped || st.chains.reshaped || old == nil || older || s.journal.files > 0 || s.last != nil {
		// Record files of an older build are folded first, so that none
		// is ever read together with the journal.
		return s.writeBase(st, enc)
	}
	var chains []byte
	if tailChanged {
		chains = tail
		if chains == nil {
			chains = []byte{}
		}
	}
	rec := encodeRecord(st.Generation, lines, chains)
	if s.journal.due(len(rec), s.opts.MaxRecords) {
		return s.writeBase(st, enc)
	}
	if err := s.appendRecord(rec); err != nil {
		return fmt.Errorf("store: %w: %w", ErrUnwritable, err)
	}
	s.werr.Store(nil)
	s.wrote = true
	s.journal.count++
	s.journal.bytes += int64(len(rec))
	st.clean()
	s.cache, s.enc = st, enc
	return nil
}

// encodeJobs returns each job's line and, ordered by job id, the lines
// that differ from what old holds. When old holds every job and the
// callback touched only some, old is updated in place and only those are
// encoded, so the cost follows the jobs changed, not the jobs held; the
// caller drops the cache if the write then fails.
func encodeJobs(st *State, old map[*job.Job][]byte) (map[*job.Job][]byte, [][]byte, error) {
	if old == nil || st.allDirty || st.reshaped {
		return encodeAll(st, old)
	}
	touched := make([]*job.Job, 0, len(st.dirty))
	for j := range st.dirty {
		touched = append(touched, j)
	}
	sort.Slice(touched, func(a, b int) bool { return touched[a].ID < touched[b].ID })
	var changed [][]byte
	for _, j := range touched {
		b, err := json.Marshal(j)
		if err != nil {
			return nil, nil, fmt.Errorf("store: encode job %s: %w", j.ID, err)
		}
		if line, ok := old[j]; !ok || !bytes.Equal(b, line) {
			changed = append(changed, b)
		}
		old[j] = b
	}
	return old, changed, nil
}

// encodeAll encodes every job the callback may have touched (all of them
// when it called All), reusing old's lines for the others.
func encodeAll(st *State, old map[*job.Job][]byte) (map[*job.Job][]byte, [][]byte, error) {
	enc := make(map[*job.Job][]byte, len(st.jobs))
	var changed [][]byte
	for _, j := range st.jobs {
		line, ok := old[j]
		if !ok || st.allDirty || st.dirty[j] {
			b, err := json.Marshal(j)
			if err != nil {
				return nil, nil, fmt.Errorf("store: encode job %s: %w", j.ID, err)
			}
			if !ok || !bytes.Equal(b, line) {
				changed = append(changed, b)
			}
			line = b
		}
		enc[j] = line
	}
	return enc, changed, nil
}

// encodeBase encodes st whole as jobs.json (enc holding every job's line).
func encodeBase(st *State, enc map[*job.Job][]byte) ([]byte, error) {
	size := 64
	for _, j := range st.jobs {
		size += len(enc[j]) + 2
	}
	tail, _, err := st.chains.tail()
	if err != nil {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+len(tail)))
	fmt.Fprintf(buf, "{\"version\":%d,\"generation\":%d,\"jobs\":[", FormatVersion, st.Generation)
	for i, j := range st.jobs {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteByte('\n')
		buf.Write(enc[j])
	}
	buf.WriteString("\n]")
	buf.Write(tail)
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}

// writeBase replaces jobs.json atomically with st whole (enc holding every
// job's line), then removes the records it now holds.
func (s *Store) writeBase(st *State, enc map[*job.Job][]byte) error {
	b, err := encodeBase(st, enc)
	if err != nil {
		return err
	}
	if s.last != nil {
		if err := s.keepBadAside(); err != nil {
			return err
		}
	}
	if err := s.opts.WriteFile(s.Path(), b, 0o600); err != nil {
		// A failed directory sync leaves the new file in place, but it may
		// not survive a crash: unwritable too.
		return fmt.Errorf("store: %w: %w", ErrUnwritable, err)
	}
	if s.last != nil {
		s.restored(st.Generation)
	}
	s.werr.Store(nil)
	s.wrote = false
	if s.journal.files > 0 || s.cache != st {
		s.pruneRecords(st.Generation)
	}
	j := s.resetJournal()
	j.baseSize = int64(len(b))
	s.remember(st, enc, st.Generation, j)
	return nil
}

// Get returns a copy of the job with id.
func (s *Store) Get(ctx context.Context, id string) (job.Job, error) {
	var out job.Job
	err := s.View(ctx, func(st *State) error {
		j := st.Job(id)
		if j == nil {
			return fmt.Errorf("store: %w: %q", ErrNotFound, id)
		}
		out = j.Clone()
		return nil
	})
	return out, err
}

// List returns copies of all jobs ordered by id.
func (s *Store) List(ctx context.Context) ([]job.Job, error) {
	var out []job.Job
	err := s.View(ctx, func(st *State) error {
		out = make([]job.Job, 0, len(st.jobs))
		for _, j := range st.jobs {
			out = append(out, j.Clone())
		}
		return nil
	})
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, err
}

// Fingerprint identifies one version of the store on disk cheaply:
// jobs.json's inode, size and modification time (which change on every
// rewrite, since every rewrite renames a new file into place), and the
// journal's inode and size (which grow with every record).
type Fingerprint struct {
	Ino         uint64
	Size        int64
	MTime       int64
	JournalIno  uint64
	JournalSize int64
}

// Fingerprint stats jobs.json and the journal; a missing jobs.json has the
// zero fingerprint.
func (s *Store) Fingerprint() (Fingerprint, error) {
	fp, err := s.baseFingerprint()
	if err != nil || fp == (Fingerprint{}) {
		return fp, err
	}
	fi, err := os.Stat(s.JournalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return fp, nil
	}
	if err != nil {
		return Fingerprint{}, fmt.Errorf("store: stat: %w", err)
	}
	fp.JournalIno, fp.JournalSize = inode(fi), fi.Size()
	return fp, nil
}

// baseFingerprint stats jobs.json alone.
func (s *Store) baseFingerprint() (Fingerprint, error) {
	fi, err := os.Stat(s.Path())
	if errors.Is(err, fs.ErrNotExist) {
		return Fingerprint{}, nil
	}
	if err != nil {
		return Fingerprint{}, fmt.Errorf("store: stat: %w", err)
	}
	return Fingerprint{Ino: inode(fi), Size: fi.Size(), MTime: fi.ModTime().UnixNano()}, nil
}
