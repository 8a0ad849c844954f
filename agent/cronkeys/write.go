package cronkeys

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/atomicfile"
)

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
