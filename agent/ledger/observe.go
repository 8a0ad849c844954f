package ledger

import "sync"

// observers are the functions told of the lines appended: mine of those
// this Ledger appends, all of those any process appends.
type observers struct {
	mu   sync.RWMutex
	mine []func(Entry)
	all  []func(Entry)
}

// Observe registers fn to be called with every line Append writes, after it
// is durable, in the appending goroutine. fn must be quick and must not
// append to the ledger itself.
func (l *Ledger) Observe(fn func(Entry)) {
	l.obs.mu.Lock()
	l.obs.mine = append(l.obs.mine, fn)
	l.obs.mu.Unlock()
}

// ObserveAll registers fn to be called once with every line appended to
// the ledger's directory from now on, by this Ledger or by anything else
// (another process on the same home, another Ledger on the directory). The
// lines this Ledger appends reach fn as they reach Observe's functions; the
// others reach it, whole and in file order, when Follow finds them. fn must
// be quick and must not append to the ledger itself.
func (l *Ledger) ObserveAll(fn func(Entry)) {
	l.fol.start(l.dir)
	l.obs.mu.Lock()
	l.obs.all = append(l.obs.all, fn)
	l.obs.mu.Unlock()
}

// notify tells every observer of a line this Ledger appended.
func (o *observers) notify(e Entry) {
	o.mu.RLock()
	mine, all := o.mine, o.all
	o.mu.RUnlock()
	for _, fn := range mine {
		fn(e)
	}
	for _, fn := range all {
		fn(e)
	}
}

// notifyOthers tells ObserveAll's observers of a line appended by
// something else.
func (o *observers) notifyOthers(e Entry) {
	o.mu.RLock()
	all := o.all
	o.mu.RUnlock()
	for _, fn := range all {
		fn(e)
	}
}
