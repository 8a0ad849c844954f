package relay

import "sync"

// Broadcast wakes every waiter at once: C returns a channel that is closed at
// the next Notify. A waiter takes C before it looks at the state it waits on
// (for a dispatcher: before NextDue), so a Notify in between is not missed.
// The zero value is ready to use; it is safe for concurrent use.
type Broadcast struct {
	mu sync.Mutex
	ch chan struct{} // closed and dropped by Notify; nil while nobody waits
}

// C returns the channel the next Notify closes.
func (b *Broadcast) C() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// Notify wakes everyone holding a channel from C.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
}
