package nas

import "testing"

// TestSeenSetGenerations: a delivery id is recognised as a repeat among the
// last seenCap to 2×seenCap ids, across generation changes in which the
// older generation's map is emptied and reused, and forgotten after that.
func TestSeenSetGenerations(t *testing.T) {
	t.Parallel()
	var m seenSet
	key := func(i int) deliveryKey { return deliveryKey{scheduleID: "s", token: int64(i), attempt: 1} }
	for i := range seenCap {
		if !m.first(key(i)) {
			t.Fatalf("id %d reported seen before it was", i)
		}
	}
	// Generation 1 is full; ids 0..seenCap-1 are all repeats.
	for _, i := range []int{0, seenCap / 2, seenCap - 1} {
		if m.first(key(i)) {
			t.Fatalf("id %d of the current generation not recognised", i)
		}
	}
	// Generation 2: generation 1 is still remembered.
	for i := seenCap; i < 2*seenCap; i++ {
		if !m.first(key(i)) {
			t.Fatalf("id %d reported seen before it was", i)
		}
	}
	if m.first(key(0)) || m.first(key(2*seenCap-1)) {
		t.Fatal("an id of the previous or current generation not recognised")
	}
	// Generation 3 reuses generation 1's map: its ids are forgotten, those
	// of generation 2 are remembered, and the new ones are recorded.
	if !m.first(key(2 * seenCap)) {
		t.Fatal("a new id reported seen")
	}
	if !m.first(key(1)) {
		t.Fatal("an id two generations old is still remembered")
	}
	if m.first(key(seenCap)) || m.first(key(2*seenCap)) || m.first(key(1)) {
		t.Fatal("an id of the previous or current generation not recognised after the map was reused")
	}
	if len(m.cur) != 2 || len(m.prev) != seenCap {
		t.Fatalf("generations hold %d and %d ids, want 2 and %d", len(m.cur), len(m.prev), seenCap)
	}
}
