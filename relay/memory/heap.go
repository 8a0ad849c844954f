package memory

import "container/heap"

// dueHeap orders armed entries by due time, then by their place among
// their agent's fires due in the same millisecond, then arm order.
type dueHeap []*entry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].dueMs != h[j].dueMs {
		return h[i].dueMs < h[j].dueMs
	}
	if h[i].tie != h[j].tie {
		return h[i].tie < h[j].tie
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dueIdx = i
	h[j].dueIdx = j
}

// Push implements heap.Interface; use push.
func (h *dueHeap) Push(x any) {
	ent := x.(*entry)
	ent.dueIdx = len(*h)
	*h = append(*h, ent)
}

// Pop implements heap.Interface; use remove.
func (h *dueHeap) Pop() any {
	old := *h
	ent := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ent.dueIdx = -1
	return ent
}

func (h *dueHeap) push(ent *entry)   { heap.Push(h, ent) }
func (h *dueHeap) remove(ent *entry) { heap.Remove(h, ent.dueIdx) }
func (h *dueHeap) fix(ent *entry)    { heap.Fix(h, ent.dueIdx) }

// countDue counts the entries due at nowMs in the subtree at i, visiting
// only those (a parent is never due later than its children).
func (h dueHeap) countDue(i int, nowMs int64) int {
	if i >= len(h) || h[i].dueMs > nowMs {
		return 0
	}
	return 1 + h.countDue(2*i+1, nowMs) + h.countDue(2*i+2, nowMs)
}

// leaseHeap orders leased entries by lease expiry.
type leaseHeap []*entry

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].untilMs < h[j].untilMs }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].leasIdx = i
	h[j].leasIdx = j
}

// Push implements heap.Interface; use push.
func (h *leaseHeap) Push(x any) {
	ent := x.(*entry)
	ent.leasIdx = len(*h)
	*h = append(*h, ent)
}

// Pop implements heap.Interface; use remove.
func (h *leaseHeap) Pop() any {
	old := *h
	ent := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ent.leasIdx = -1
	return ent
}

func (h *leaseHeap) push(ent *entry)   { heap.Push(h, ent) }
func (h *leaseHeap) remove(ent *entry) { heap.Remove(h, ent.leasIdx) }
func (h *leaseHeap) fix(ent *entry)    { heap.Fix(h, ent.leasIdx) }

// expiry is when a recorded delivery id may be forgotten.
type expiry struct {
	at int64
	id string
}

// expiryHeap orders delivery-id records by expiry.
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }

// Push implements heap.Interface; use push.
func (h *expiryHeap) Push(x any) { *h = append(*h, x.(expiry)) }

// Pop implements heap.Interface; use pop.
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h *expiryHeap) push(x expiry) { heap.Push(h, x) }
func (h *expiryHeap) pop() expiry   { return heap.Pop(h).(expiry) }
