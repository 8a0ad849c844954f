package cronkeys

import (
	"context"
	"slices"
	"sync"
	"time"
)

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
