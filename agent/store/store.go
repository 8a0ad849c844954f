package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
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

	jfile journalFile // the journal, kept open while it is the file at its path
	aside asides      // copies of files that cannot be used

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
	return &Store{home: home, opts: opts, lock: lf,
		jfile: journalFile{path: filepath.Join(home, JournalFile), home: home}, aside: asides{now: opts.Now}}, nil
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
	s.jfile.close()
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
		aside, kerr := s.aside.keep(s.Path(), raw)
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
		s.health.Store(healthOf(fp, s.last))
	}
}

func (s *Store) drop() {
	s.cache, s.baseFP, s.baseGen, s.enc, s.journal = nil, Fingerprint{}, 0, nil, journal{}
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
		pruneRecords(s.home, st.Generation)
	}
	j := s.jfile.reset()
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
