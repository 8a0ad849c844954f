package ledger

import "sync"

// observers are the functions told of every line appended.
type observers struct {
	mu  sync.RWMutex
	fns []func(Entry)
}

// Observe registers fn to be called with every line Append writes, after it
// is durable, in the appending goroutine. fn must be quick and must not
// append to the ledger itself.
func (l *Ledger) Observe(fn func(Entry)) {
	l.obs.mu.Lock()
	l.obs.fns = append(l.obs.fns, fn)
	l.obs.mu.Unlock()
}

func (o *observers) notify(e Entry) {
	o.mu.RLock()
	fns := o.fns
	o.mu.RUnlock()
	for _, fn := range fns {
		fn(e)
	}
}
