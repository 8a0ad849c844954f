// Package cronkeys keeps the per-job cron keys of direct delivery in the
// agent's home.
//
// Under direct delivery (cron.chronos.delivery: direct) NAS mints a key for
// each job at provision and returns it in the provision answer; the relay's
// dispatcher then signs the job's fires with it (HS256) and calls the agent
// without NAS on the path. The agent keeps, for each job, its current key
// and the keys it retired, each retired key with the fire_at of the last
// slot armed under it (valid_through): a retired key verifies only the
// tokens of slots up to that one, and is purged a day after it.
//
// The store is one file, <home>/cronkeys.json, mode 0600, replaced
// atomically (temporary file, fsync, rename, directory fsync) under an
// exclusive lock on <home>/cronkeys.lock, so the serving agent and the jobs
// commands, which both provision, can share it. Readers (the fire
// verifier) take no lock: they read a snapshot, and read the file again
// when another process replaced it. Neither a key nor the file's content is
// ever logged; Key's String shows the id only.
package cronkeys

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

// Files in the agent's home.
const (
	// File holds the keys.
	File = "cronkeys.json"
	// LockFile serialises the writers of File across processes.
	LockFile = "cronkeys.lock"
)

// RetiredGrace is how long after its valid_through a retired key is kept
// before it is purged.
const RetiredGrace = 24 * time.Hour

// Delivery modes as the agent shows them per job.
const (
	Direct = contract.DeliveryDirect
	NAS    = contract.DeliveryNAS
)

// Defaults of Options.
const (
	// DefaultRecheck is how often a lookup looks whether another process
	// replaced the file.
	DefaultRecheck = 100 * time.Millisecond
	// DefaultPendingWait bounds how long a lookup of an unknown key waits
	// for a provision of the same job in progress in this process.
	DefaultPendingWait = 5 * time.Second
)

// Key is one cron key as the file keeps it.
type Key struct {
	// ID names the key: the kid of the tokens it signs.
	ID string `json:"id"`
	// Key is the key itself, unpadded base64url as NAS sent it.
	Key string `json:"key"`
	// Since is when the agent received it.
	Since time.Time `json:"since"`
	// ArmedThrough is the latest fire_at NAS armed under the key.
	ArmedThrough time.Time `json:"armed_through,omitzero"`
	// ValidThrough, set on a retired key only, is the fire_at of the last
	// slot armed under it: tokens of later slots are refused.
	ValidThrough *time.Time `json:"valid_through,omitempty"`
}

// String shows the key's id, never the key.
func (k Key) String() string { return "cronkey(" + k.ID + ")" }

// GoString shows the key's id, never the key.
func (k Key) GoString() string { return k.String() }

// LogValue logs the key's id, never the key.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.ID) }

// Job is one job's keys.
type Job struct {
	// Current is the key the job's fires are signed with now; nil when the
	// job is not delivered directly.
	Current *Key `json:"current,omitempty"`
	// Retired are its former keys, newest last.
	Retired []Key `json:"retired,omitempty"`
	// Refused is set when NAS answered a provision that asked for direct
	// delivery with NAS-mediated delivery (its agents file does not allow
	// it): the agent does not ask again for an arm that is unchanged.
	Refused bool `json:"refused,omitempty"`
}

// content is the file.
type content struct {
	Version int             `json:"version"`
	Jobs    map[string]*Job `json:"jobs"`
}

// liveKey is a key decoded for verifying.
type liveKey struct {
	id     string
	secret []byte
	// through bounds the fire_at of the tokens it verifies; zero for a
	// current key.
	through time.Time
}

// snapshot is the file as read at one time.
type snapshot struct {
	jobs map[string][]liveKey // the current key first, when there is one
	raw  map[string]*Job
	info fs.FileInfo // nil when the file did not exist
}

// Options configure a Store.
type Options struct {
	// Now is the clock; default time.Now. Retired keys are purged by it.
	Now func() time.Time
	// Logger receives the store's warnings (never a key); default
	// slog.Default().
	Logger *slog.Logger
	// Recheck is how often a lookup looks whether another process replaced
	// the file; default DefaultRecheck.
	Recheck time.Duration
	// PendingWait bounds how long a lookup of an unknown key waits for a
	// provision of the same job in progress; default DefaultPendingWait.
	PendingWait time.Duration
}

// Store is the key store of one home. It is safe for concurrent use.
type Store struct {
	path, lock string
	o          Options

	mu      sync.Mutex // serialises this process's writers and reloads
	snap    atomic.Pointer[snapshot]
	checked atomic.Int64 // when the file was last looked at (UnixNano of time.Now)

	pendMu  sync.Mutex
	pending map[string]*pend
}

// pend is a provision in progress for a job.
type pend struct {
	n    int
	done chan struct{}
}

// Open returns the store of home, reading its file (a missing file is an
// empty store; one that does not decode is set aside at the next write and
// read as empty, with a warning).
func Open(home string, o Options) (*Store, error) {
	if home == "" {
		return nil, errors.New("cronkeys: a home directory is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultRecheck
	}
	if o.PendingWait <= 0 {
		o.PendingWait = DefaultPendingWait
	}
	s := &Store{path: filepath.Join(home, File), lock: filepath.Join(home, LockFile), o: o, pending: map[string]*pend{}}
	snap, err := s.read()
	if err != nil && !errors.Is(err, errCorrupt) {
		return nil, err
	}
	s.snap.Store(snap)
	s.checked.Store(time.Now().UnixNano())
	return s, nil
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

var errCorrupt = errors.New("cronkeys: the key file does not decode")

// read reads the file into a snapshot. A file that does not decode is an
// empty snapshot and errCorrupt.
func (s *Store) read() (*snapshot, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return newSnapshot(nil, nil), nil
	}
	if err != nil {
		return nil, fmt.Errorf("cronkeys: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cronkeys: %w", err)
	}
	var c content
	dec := json.NewDecoder(f)
	if err := dec.Decode(&c); err != nil {
		s.o.Logger.Warn("cronkeys: the key file does not decode; the jobs' keys are fetched again at the next reconcile", "file", s.path, "error", jsonErrorKind(err))
		return newSnapshot(nil, info), errCorrupt
	}
	return newSnapshot(c.Jobs, info), nil
}

// jsonErrorKind describes a decoding error without quoting the file.
func jsonErrorKind(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("wrong type at byte %d", te.Offset)
	}
	return "does not decode"
}

func newSnapshot(jobs map[string]*Job, info fs.FileInfo) *snapshot {
	sn := &snapshot{jobs: make(map[string][]liveKey, len(jobs)), raw: jobs, info: info}
	if sn.raw == nil {
		sn.raw = map[string]*Job{}
	}
	for id, j := range jobs {
		if j == nil {
			continue
		}
		var keys []liveKey
		if j.Current != nil {
			if secret, ok := decodeSecret(j.Current.Key); ok {
				keys = append(keys, liveKey{id: j.Current.ID, secret: secret})
			}
		}
		for _, r := range j.Retired {
			secret, ok := decodeSecret(r.Key)
			if !ok || r.ValidThrough == nil {
				continue
			}
			keys = append(keys, liveKey{id: r.ID, secret: secret, through: *r.ValidThrough})
		}
		if len(keys) > 0 || j.Current != nil {
			sn.jobs[id] = keys
		}
	}
	return sn
}

func decodeSecret(enc string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) != contract.CronKeyBytes {
		return nil, false
	}
	return b, true
}

// current returns the snapshot, first reading the file again when another
// process replaced it since it was last looked at: at most every Recheck,
// or now when force.
func (s *Store) current(force bool) *snapshot {
	sn := s.snap.Load()
	now := time.Now().UnixNano()
	if !force && now-s.checked.Load() < int64(s.o.Recheck) {
		return sn
	}
	s.checked.Store(now)
	info, err := os.Stat(s.path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && sn.info == nil:
		return sn
	case err == nil && sn.info != nil && os.SameFile(info, sn.info) && info.ModTime().Equal(sn.info.ModTime()) && info.Size() == sn.info.Size():
		return sn
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fresh, err := s.read()
	if fresh == nil {
		s.o.Logger.Warn("cronkeys: reading the key file failed", "error", err)
		return sn
	}
	s.snap.Store(fresh)
	return fresh
}

// Direct reports whether jobID is delivered directly: it has a current key.
func (s *Store) Direct(jobID string) bool {
	keys, ok := s.current(false).jobs[jobID]
	return ok && len(keys) > 0 && keys[0].through.IsZero()
}

// Delivery returns jobID's delivery mode, Direct or NAS, from the file as
// it is now.
func (s *Store) Delivery(jobID string) string {
	keys, ok := s.current(true).jobs[jobID]
	if ok && len(keys) > 0 && keys[0].through.IsZero() {
		return Direct
	}
	return NAS
}

// CronKey returns the key kid of jobID and, for a retired key, the last
// fire_at it verifies (zero for the current key). A key the snapshot lacks
// is looked for again after a provision of the job in progress in this
// process ends (at most PendingWait, or ctx) and in the file as it is now:
// a fire can arrive the moment NAS answers, before the answer is stored.
func (s *Store) CronKey(ctx context.Context, jobID, kid string) ([]byte, time.Time, bool) {
	if secret, through, ok := find(s.current(false), jobID, kid); ok {
		return secret, through, true
	}
	s.waitPending(ctx, jobID)
	return find(s.current(true), jobID, kid)
}

func find(sn *snapshot, jobID, kid string) ([]byte, time.Time, bool) {
	for _, k := range sn.jobs[jobID] {
		if k.id == kid {
			return k.secret, k.through, true
		}
	}
	return nil, time.Time{}, false
}

// HasKeys reports whether jobID has any key, current or retired.
func (s *Store) HasKeys(jobID string) bool {
	return len(s.current(false).jobs[jobID]) > 0
}

// Job returns a copy of jobID's record (its keys included: callers must
// not show them), and whether there is one.
func (s *Store) Job(jobID string) (Job, bool) {
	j, ok := s.current(true).raw[jobID]
	if !ok || j == nil {
		return Job{}, false
	}
	out := Job{Refused: j.Refused, Retired: slices.Clone(j.Retired)}
	if j.Current != nil {
		c := *j.Current
		out.Current = &c
	}
	return out, true
}

// Deliveries returns the delivery mode of every job that has a current key
// (Direct); a job not listed is delivered through NAS.
func (s *Store) Deliveries() map[string]string {
	out := map[string]string{}
	for id, keys := range s.current(true).jobs {
		if len(keys) > 0 && keys[0].through.IsZero() {
			out[id] = Direct
		}
	}
	return out
}

// Begin marks a provision of jobID in progress in this process, so that a
// lookup of a key of the job it does not know waits for it; call the
// returned function once the answer is stored (or the provision failed).
func (s *Store) Begin(jobID string) (end func()) {
	s.pendMu.Lock()
	p := s.pending[jobID]
	if p == nil {
		p = &pend{done: make(chan struct{})}
		s.pending[jobID] = p
	}
	p.n++
	s.pendMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.pendMu.Lock()
			defer s.pendMu.Unlock()
			if p.n--; p.n == 0 {
				delete(s.pending, jobID)
				close(p.done)
			}
		})
	}
}

// waitPending waits for a provision of jobID in progress to end, at most
// PendingWait.
func (s *Store) waitPending(ctx context.Context, jobID string) {
	s.pendMu.Lock()
	p := s.pending[jobID]
	s.pendMu.Unlock()
	if p == nil {
		return
	}
	t := time.NewTimer(s.o.PendingWait)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// ErrBadKey is returned (wrapped) for a provision answer whose cron key is
// not the base64url of a 32-byte key or whose id is malformed.
var ErrBadKey = errors.New("cronkeys: the provision answer's cron key is malformed")

// Provisioned records NAS's answer to a provision of jobID at fireAt that
// asked for delivery asked ("" or NAS, or Direct), and returns once the
// file is written. With a direct answer the answer's key becomes the
// job's current key (a key of another id is retired, valid through the
// last slot armed under it); with a NAS-mediated one the job has no
// current key any more (retired likewise). Retired keys past their grace
// are purged.
func (s *Store) Provisioned(ctx context.Context, jobID string, fireAt time.Time, asked string, resp contract.ProvisionResponse) error {
	var fresh Key
	direct := resp.Delivery == contract.DeliveryDirect
	if direct {
		if _, ok := decodeSecret(resp.CronKey); !ok || !strings.HasPrefix(resp.CronKeyID, contract.CronKeyIDPrefix) || len(resp.CronKeyID) > 64 {
			return fmt.Errorf("job %s: %w", jobID, ErrBadKey)
		}
		fresh = Key{ID: resp.CronKeyID, Key: resp.CronKey, Since: s.o.Now().UTC(), ArmedThrough: fireAt.UTC()}
	}
	return s.update(ctx, func(jobs map[string]*Job) {
		j := jobs[jobID]
		if j == nil {
			j = &Job{}
			jobs[jobID] = j
		}
		switch {
		case direct && j.Current != nil && j.Current.ID == fresh.ID:
			if fireAt.After(j.Current.ArmedThrough) {
				j.Current.ArmedThrough = fireAt.UTC()
			}
			j.Current.Key = fresh.Key
		case direct:
			retire(j)
			j.Current = &fresh
		default:
			retire(j)
		}
		j.Refused = !direct && asked == contract.DeliveryDirect
		if j.Current == nil && len(j.Retired) == 0 && !j.Refused {
			delete(jobs, jobID)
		}
	})
}

// retire moves j's current key, if any, to its retired keys, valid through
// the last slot armed under it.
func retire(j *Job) {
	c := j.Current
	if c == nil {
		return
	}
	j.Current = nil
	if c.ArmedThrough.IsZero() {
		return // armed for no slot: it verifies nothing
	}
	through := c.ArmedThrough
	c.ValidThrough = &through
	j.Retired = append(j.Retired, *c)
}

// Drop forgets every key of the jobs at once: they were cancelled or
// removed.
func (s *Store) Drop(ctx context.Context, jobIDs ...string) error {
	if len(jobIDs) == 0 {
		return nil
	}
	sn := s.current(true)
	found := false
	for _, id := range jobIDs {
		if _, ok := sn.raw[id]; ok {
			found = true
		}
	}
	if !found {
		return nil
	}
	return s.update(ctx, func(jobs map[string]*Job) {
		for _, id := range jobIDs {
			delete(jobs, id)
		}
	})
}

// Keep forgets the keys of every job keep does not report (removed jobs),
// and purges retired keys past their grace. It writes only when it changes
// something.
func (s *Store) Keep(ctx context.Context, keep func(jobID string) bool) error {
	sn := s.current(true)
	now := s.o.Now()
	change := false
	for id, j := range sn.raw {
		if !keep(id) || (j != nil && expired(j, now)) {
			change = true
			break
		}
	}
	if !change {
		return nil
	}
	return s.update(ctx, func(jobs map[string]*Job) {
		for id := range jobs {
			if !keep(id) {
				delete(jobs, id)
			}
		}
	})
}

// expired reports whether j has a retired key past its grace.
func expired(j *Job, now time.Time) bool {
	for _, r := range j.Retired {
		if r.ValidThrough == nil || now.After(r.ValidThrough.Add(RetiredGrace)) {
			return true
		}
	}
	return false
}

// purge drops the retired keys past their grace, and the jobs left with
// nothing.
func purge(jobs map[string]*Job, now time.Time) {
	for id, j := range jobs {
		if j == nil {
			delete(jobs, id)
			continue
		}
		j.Retired = slices.DeleteFunc(j.Retired, func(r Key) bool {
			return r.ValidThrough == nil || now.After(r.ValidThrough.Add(RetiredGrace))
		})
		if len(j.Retired) == 0 {
			j.Retired = nil
		}
		if j.Current == nil && len(j.Retired) == 0 && !j.Refused {
			delete(jobs, id)
		}
	}
}

// update applies fn to the file's jobs under the cross-process lock, purges
// expired keys and writes the file back (0600, atomically).
func (s *Store) update(ctx context.Context, fn func(map[string]*Job)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := lockFile(ctx, s.lock)
	if err != nil {
		return err
	}
	defer unlock()
	sn, err := s.read()
	if errors.Is(err, errCorrupt) {
		aside := fmt.Sprintf("%s.corrupt-%d", s.path, time.Now().UnixNano())
		if rerr := os.Rename(s.path, aside); rerr != nil {
			return fmt.Errorf("cronkeys: setting the undecodable key file aside: %w", rerr)
		}
		s.o.Logger.Warn("cronkeys: the undecodable key file was set aside", "file", aside)
		sn = newSnapshot(nil, nil)
	} else if err != nil {
		return err
	}
	jobs := clone(sn.raw)
	fn(jobs)
	purge(jobs, s.o.Now())
	data, err := encode(jobs)
	if err != nil {
		return err
	}
	if err := atomicfile.Replace(s.path, data, 0o600); err != nil {
		return fmt.Errorf("cronkeys: %w", err)
	}
	info, err := os.Stat(s.path)
	if err != nil {
		return fmt.Errorf("cronkeys: %w", err)
	}
	s.snap.Store(newSnapshot(jobs, info))
	s.checked.Store(time.Now().UnixNano())
	return nil
}

// clone deep-copies jobs, so a snapshot readers hold is never changed.
func clone(jobs map[string]*Job) map[string]*Job {
	out := make(map[string]*Job, len(jobs))
	for id, j := range jobs {
		if j == nil {
			continue
		}
		c := &Job{Refused: j.Refused, Retired: slices.Clone(j.Retired)}
		if j.Current != nil {
			k := *j.Current
			c.Current = &k
		}
		out[id] = c
	}
	return out
}

func encode(jobs map[string]*Job) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(content{Version: 1, Jobs: jobs}); err != nil {
		return nil, fmt.Errorf("cronkeys: encode: %w", err)
	}
	return b.Bytes(), nil
}
