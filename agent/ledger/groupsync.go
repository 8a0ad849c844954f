package ledger

import (
	"os"
	"sync"
)

// groupSync lets appends made at the same moment to one file share a sync:
// an append whose line was written before a sync of that file began waits
// for that sync instead of starting its own. Under a burst of runs, the
// fires' lines and the starting runs' lines go to disk together, and each
// append still returns only once its own line is durable. A sync of any
// descriptor of a file makes all that was written to the file durable, so
// appends through different descriptors share it too.
type groupSync struct {
	mu    sync.Mutex
	files map[string]*fileSync
}

// fileSync is the state of the syncs of one file. Syncs run one at a
// time, and each covers the appends written when it began, so the ranges
// they cover follow each other.
type fileSync struct {
	mu      sync.Mutex
	done    *sync.Cond
	written uint64 // appends whose write returned
	covered uint64 // appends the syncs that ended cover
	fails   []failed
	syncing bool
	waiting int
}

// failed is a sync that failed, and the appends it alone covered:
// after..upTo.
type failed struct {
	after, upTo uint64
	err         error
}

// maxFails bounds the failed syncs remembered.
const maxFails = 64

// file returns the sync state of path, forgetting those of other files
// no append waits on (a new day file retires the last one).
func (g *groupSync) file(path string) *fileSync {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.files[path]; ok {
		return s
	}
	if g.files == nil {
		g.files = map[string]*fileSync{}
	}
	for p, s := range g.files {
		s.mu.Lock()
		idle := !s.syncing && s.waiting == 0
		s.mu.Unlock()
		if idle {
			delete(g.files, p)
		}
	}
	s := &fileSync{}
	s.done = sync.NewCond(&s.mu)
	g.files[path] = s
	return s
}

// wrote counts an append whose write returned and returns its number.
func (s *fileSync) wrote() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.written++
	s.waiting++
	return s.written
}

// sync returns once append n is durable: covered by a sync that began
// after its write, started by this call (through f, by sync) or by a
// concurrent one. An append gets the error of the first sync that covered
// it, even if a later sync succeeds (after a failed sync, what it should
// have written may be lost).
func (s *fileSync) sync(f *os.File, n uint64, sync func(*os.File) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() { s.waiting-- }()
	for s.covered < n {
		if s.syncing {
			s.done.Wait()
			continue
		}
		s.syncing = true
		upTo := s.written
		s.mu.Unlock()
		err := sync(f)
		s.mu.Lock()
		s.syncing = false
		if err != nil {
			if len(s.fails) == maxFails {
				s.fails = s.fails[1:]
			}
			s.fails = append(s.fails, failed{after: s.covered, upTo: upTo, err: err})
		}
		s.covered = max(s.covered, upTo)
		s.done.Broadcast()
	}
	for _, f := range s.fails {
		if n > f.after && n <= f.upTo {
			return f.err
		}
	}
	return nil
}
