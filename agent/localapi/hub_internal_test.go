package localapi

import (
	"testing"
)

// TestHubCutsOffASlowClient: a client whose buffer is full is cut off
// (its channel closed) instead of holding the others back, and resuming
// from the last event it read gives it the rest, in order, none twice.
func TestHubCutsOffASlowClient(t *testing.T) {
	t.Parallel()
	h := newHub(EventOptions{ClientBuffer: 2, Keep: 100})
	_, slow, _ := h.subscribe(nil)
	_, fast, _ := h.subscribe(nil)
	var fastGot []uint64
	for i := range 5 {
		h.publish(EventRun, map[string]int{"n": i})
		ev := <-fast
		fastGot = append(fastGot, ev.ID)
	}
	var read []Event
	for ev := range slow { // two buffered, then closed
		read = append(read, ev)
	}
	if len(read) != 2 || read[0].ID != fastGot[0] || read[1].ID != fastGot[1] {
		t.Fatalf("slow client read %v, fast %v", read, fastGot)
	}
	back, _, lost := h.subscribe(&read[1].ID)
	if lost || len(back) != 3 {
		t.Fatalf("resume: %d events, lost %v", len(back), lost)
	}
	for i, ev := range back {
		if ev.ID != fastGot[2+i] {
			t.Fatalf("resumed %d: id %d, want %d", i, ev.ID, fastGot[2+i])
		}
	}
}

// TestHubKeepsABoundedPast: only the last Keep events are kept; resuming
// from before them says events were lost.
func TestHubKeepsABoundedPast(t *testing.T) {
	t.Parallel()
	h := newHub(EventOptions{Keep: 3})
	for i := range 5 {
		h.publish(EventJob, i)
	}
	first := h.ring[0].ID
	if len(h.ring) != 3 {
		t.Fatalf("kept %d", len(h.ring))
	}
	before, older := first-1, first-2
	if back, _, lost := h.subscribe(&before); lost || len(back) != 3 {
		t.Fatalf("from the oldest kept: %d %v", len(back), lost)
	}
	if back, _, lost := h.subscribe(&older); !lost || len(back) != 3 {
		t.Fatalf("from before it: %d %v", len(back), lost)
	}
	h.close()
	if _, ch, _ := h.subscribe(nil); ch == nil {
		t.Fatal("nil channel")
	} else if _, open := <-ch; open {
		t.Fatal("a closed hub gave an open stream")
	}
}
