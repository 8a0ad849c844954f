package ledger

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupSyncShares: appends that wait on one file at once share syncs,
// and none returns before a sync that began after its write ended.
func TestGroupSyncShares(t *testing.T) {
	t.Parallel()
	f := dayFile(t)
	var g groupSync
	var syncs, began atomic.Uint64
	s := g.file(f.Name())
	gate := make(chan struct{})
	slow := func(*os.File) error {
		s.mu.Lock()
		upTo := s.written
		s.mu.Unlock()
		began.Store(upTo)
		syncs.Add(1)
		<-gate
		return nil
	}
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := s.wrote()
			if err := s.sync(f, me, slow); err != nil {
				errs <- err
				return
			}
			if began.Load() < me {
				errs <- errors.New("returned before a sync covering its write")
			}
		}()
	}
	// Every append writes before any sync ends, so that they all wait at
	// once even on a loaded machine that starts the goroutines slowly.
	for {
		s.mu.Lock()
		all := s.written >= n
		s.mu.Unlock()
		if all {
			break
		}
		time.Sleep(time.Millisecond) // the goroutines' writes, which signal nothing
	}
	// Let syncs end one at a time until every append returned.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case gate <- struct{}{}:
		case <-done:
			finished = true
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := syncs.Load(); got >= n || got == 0 {
		t.Fatalf("%d syncs for %d appends waiting at once, want them shared", got, n)
	}
}

// TestGroupSyncFailure: the appends a failed sync covered get its error,
// even when a later sync succeeds; appends written after it do not.
func TestGroupSyncFailure(t *testing.T) {
	t.Parallel()
	f := dayFile(t)
	var g groupSync
	s := g.file(f.Name())
	boom := errors.New("EIO")
	a, b := s.wrote(), s.wrote()
	if err := s.sync(f, a, func(*os.File) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("first: %v", err)
	}
	c := s.wrote()
	if err := s.sync(f, c, func(*os.File) error { return nil }); err != nil {
		t.Fatalf("after: %v", err)
	}
	if err := s.sync(f, b, func(*os.File) error { return nil }); !errors.Is(err, boom) {
		t.Fatalf("covered by the failed sync: %v, want its error", err)
	}
}

// TestAppendsAtOnceAreDurable: concurrent appends through the ledger all
// land whole, each once.
func TestAppendsAtOnceAreDurable(t *testing.T) {
	t.Parallel()
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := Entry{Time: at, RunID: "r" + string(rune('A'+i)), JobID: "j", State: StateClaimed, Slot: at}
			if err := l.Append(context.Background(), e); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	runs, err := l.Runs(context.Background(), Filter{JobID: "j"})
	if err != nil || len(runs) != 40 {
		t.Fatalf("%d runs, %v; want 40", len(runs), err)
	}
}

// dayFile creates an empty day file, closed when the test ends.
func dayFile(t *testing.T) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "day.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
