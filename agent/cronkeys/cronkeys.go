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
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/contract"
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
