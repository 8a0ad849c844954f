package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/job"
	"github.com/chronoscron/chronos/internal/filelock"
)

// badFile is the error of a jobs.json that cannot be used: it does not
// decode (ErrCorrupt) or it is over Options.MaxFile (ErrTooLarge).
type badFile struct {
	err    error       // the full error, with paths
	reason string      // why, without paths (for /readyz)
	fp     Fingerprint // the bad file's
	aside  string      // where a copy was kept; empty: none yet
}

func (e *badFile) Error() string { return e.err.Error() }

func (e *badFile) Unwrap() error { return e.err }

// lastGood is the last good state a store read or wrote, held while
// jobs.json on disk is bad. A store that read jobs.json good once keeps
// working from it when the file then turns bad (garbage or an oversize
// file written over it): reads answer from it, and the next change writes
// it back, with the change, over the bad file, which is first kept aside
// as <name>.corrupt-<timestamp>. A store that never read the file good has
// nothing to hold and refuses it.
type lastGood struct {
	data []byte   // the state, encoded as jobs.json
	gen  uint64   // its generation
	bad  *badFile // the bad jobs.json it stands in for
}

// setBy says which setting sets lim, for a message.
func setBy(lim Limit) string {
	if lim.Setting == "" {
		return ""
	}
	return " set by " + lim.Setting
}

// hold starts holding prev (clean, with its lines prevEnc) as the last good
// state in place of the bad jobs.json, and returns it to read.
func (s *Store) hold(bad *badFile, prev *State, prevEnc map[*job.Job][]byte) (*State, error) {
	enc, _, err := encodeAll(prev, prevEnc)
	if err != nil {
		return nil, bad
	}
	data, err := encodeBase(prev, enc)
	if err != nil {
		return nil, bad
	}
	s.last = &lastGood{data: data, gen: prev.Generation, bad: bad}
	s.health.Store(healthOf(bad.fp, s.last))
	s.warnBad(bad)
	prev.clean()
	s.holdCache(prev, enc)
	return prev, nil
}

// holdCache caches st, the held state, so that the next reads reuse it
// while jobs.json stays the same bad file.
func (s *Store) holdCache(st *State, enc map[*job.Job][]byte) {
	s.cache, s.enc, s.baseFP, s.baseGen, s.journal, s.wrote = st, enc, Fingerprint{}, st.Generation, journal{}, false
}

// readHeld reads while the last good state is held: that state while
// jobs.json is the same bad file, else jobs.json again: good, it ends the
// hold; bad again, the hold goes on in place of the new bad file.
func (s *Store) readHeld() (*State, error) {
	fp, err := s.baseFingerprint()
	if err == nil && fp == s.last.bad.fp {
		if s.cache == nil {
			return s.decodeHeld()
		}
		s.cache.clean()
		return s.cache, nil
	}
	s.drop()
	st, err := s.readBase()
	var bad *badFile
	if errors.As(err, &bad) {
		s.last.bad = bad
		s.health.Store(healthOf(bad.fp, s.last))
		s.warnBad(bad)
		return s.decodeHeld()
	}
	if err != nil {
		return nil, err
	}
	s.opts.Logger.Info("store: jobs.json reads again; the last good jobs held in its place are dropped",
		"path", s.Path(), "generation", st.Generation)
	s.last, s.warned = nil, ""
	s.health.Store(healthOf(s.baseFP, s.last))
	return st, nil
}

// decodeHeld decodes the held state and caches it.
func (s *Store) decodeHeld() (*State, error) {
	st, enc, err := parseBase(s.last.data)
	if err != nil {
		return nil, fmt.Errorf("store: the last good jobs held in memory: %w", err)
	}
	s.holdCache(st, enc)
	return st, nil
}

// warnBad logs, once per bad content, that jobs.json is bad and the last
// good state is held.
func (s *Store) warnBad(bad *badFile) {
	key := bad.aside
	if key == "" {
		key = fmt.Sprint(bad.fp)
	}
	if key == s.warned {
		return
	}
	s.warned = key
	s.opts.Logger.Warn("store: jobs.json on disk is bad; working from the last good jobs, which the next change writes back over it",
		"path", s.Path(), "reason", bad.reason, "kept_at", bad.aside, "generation", s.last.gen, "error", bad.err)
}

// keepBadAside keeps the bad jobs.json aside before it is replaced, unless
// a copy was kept when it was found bad. The file is linked (or copied,
// streaming, where links are refused) to <name>.corrupt-<timestamp>, never
// read into memory whole. It fails, and the write with it, when no copy
// can be kept.
func (s *Store) keepBadAside() error {
	bad := s.last.bad
	if bad.aside != "" {
		return nil
	}
	aside, err := s.aside.link(s.Path())
	if err != nil {
		return fmt.Errorf("store: %w: keeping the bad %s aside before replacing it: %w", ErrUnwritable, s.Path(), err)
	}
	bad.aside = aside
	return nil
}

// restored ends the hold once the last good state, with a change, of
// generation gen, replaced the bad jobs.json.
func (s *Store) restored(gen uint64) {
	bad := s.last.bad
	s.opts.Logger.Warn("store: the bad jobs.json was replaced by the last good jobs and the change made to them",
		"path", s.Path(), "reason", bad.reason, "kept_at", bad.aside, "generation", gen)
	s.last, s.warned = nil, ""
}

// health is what Health found for one version of the store on disk.
type health struct {
	fp  Fingerprint
	err error
}

// healthWait bounds how long Health waits for the shared lock.
const healthWait = time.Second

// Health reports whether jobs.json on disk can be read: nil when it can,
// else why not, in words without paths (it does not parse or is over the
// limit, and whether the last good jobs are used in its place). Reads and
// writes keep the answer current; Health reads jobs.json itself only when
// it changed on disk since, and then never waits on another caller of this
// store: while one holds it, the last answer stands.
func (s *Store) Health(ctx context.Context) error {
	fp, err := s.baseFingerprint()
	if err != nil {
		return public(s.home, err)
	}
	if h := s.health.Load(); h != nil && h.fp == fp {
		return h.err
	}
	last := func() error {
		if h := s.health.Load(); h != nil {
			return h.err
		}
		return nil
	}
	if !s.mu.TryLock() {
		return last()
	}
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	if err := s.acquire(ctx, filelock.Shared); err != nil {
		return last()
	}
	defer s.release()
	_, err = s.read()
	switch {
	case s.last != nil:
	case err != nil:
		s.health.Store(&health{fp: fp, err: public(s.home, err)})
	default:
		s.health.Store(healthOf(fp, s.last))
	}
	return last()
}

// healthOf is what a read or write found of jobs.json, of fingerprint fp:
// good, or held bad (last, when not nil).
func healthOf(fp Fingerprint, last *lastGood) *health {
	var herr error
	if last != nil {
		herr = fmt.Errorf("%s; the last good jobs (generation %d) are used until the next change writes them back",
			last.bad.reason, last.gen)
	}
	return &health{fp: fp, err: herr}
}

// public returns err in words without the path of home.
func public(home string, err error) error {
	var bad *badFile
	if errors.As(err, &bad) {
		return errors.New(bad.reason)
	}
	msg := strings.ReplaceAll(err.Error(), home+string(filepath.Separator), "")
	return errors.New(strings.ReplaceAll(msg, home, "home"))
}
