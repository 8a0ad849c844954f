package job

import (
	"testing"
	"time"
)

func TestClaimSlotIsACompareAndSet(t *testing.T) {
	t.Parallel()
	slot := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	j := &Job{ID: "a", NextRunAt: &slot}
	if _, ok := j.ClaimSlot(slot.Add(-time.Minute), Claim{RunID: "old"}); ok {
		t.Fatal("claimed a slot that is not next_run_at")
	}
	c, ok := j.ClaimSlot(slot, Claim{RunID: "r1"})
	if !ok || c.Token != 1 {
		t.Fatalf("claim %+v %v", c, ok)
	}
	c2 := j.AddClaim(Claim{RunID: "r2"})
	if c2.Token != 2 {
		t.Fatalf("token %d, want 2", c2.Token)
	}
	if j.DropClaim("r1", 2) {
		t.Fatal("dropped a claim with the wrong token")
	}
	if !j.DropClaim("r1", 1) || j.DropClaim("r1", 1) {
		t.Fatal("drop is not exactly once")
	}
}
