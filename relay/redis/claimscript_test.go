package redis

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// TestClaimReadsPastCandidatesOthersTook hands the claim script candidates
// of which the first ones were taken meanwhile (no longer due) or are not
// due yet: it reads on past them, in order, and leases the next due ones
// up to what was wanted, no more.
func TestClaimReadsPastCandidatesOthersTook(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	e := openOneShard(ctx, t, func() time.Time { return clock })
	var cands []any
	for i := range 8 {
		job := "j" + strconv.Itoa(i)
		at := clock.Add(-time.Minute)
		if i == 2 {
			at = clock.Add(time.Hour) // not due yet
		}
		if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: job, FireAt: at, ScheduleID: "s-" + job}); err != nil {
			t.Fatal(err)
		}
		cands = append(cands, member("a", job))
	}
	// Another claim took j0 and j1.
	taken, _, err := e.claimShard(ctx, 0, 2, 4, 60000, relay.Flow{}, cands[:2], nil)
	if err != nil || len(taken) != 2 {
		t.Fatalf("first claim: %d, %v", len(taken), err)
	}
	got, r, err := e.claimShard(ctx, 0, 3, 6, 60000, relay.Flow{}, cands, nil)
	if err != nil || r.peeked != len(cands) {
		t.Fatalf("claim: %v, %d peeked", err, r.peeked)
	}
	var jobs []string
	for _, l := range got {
		jobs = append(jobs, l.JobID)
	}
	if want := []string{"j3", "j4", "j5"}; !slices.Equal(jobs, want) {
		t.Fatalf("leased %v, want %v", jobs, want)
	}
	st, err := e.Stats(ctx)
	if err != nil || st.Leased != 5 || st.Due != 2 {
		t.Fatalf("stats %+v, %v; want 5 leased and j6, j7 due", st, err)
	}
}

// TestClaimLeasesACandidateGivenTwiceOnce hands the claim script the same
// due candidate twice: it is leased once, with one token.
func TestClaimLeasesACandidateGivenTwiceOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := openOneShard(ctx, t, nil)
	if _, err := e.Arm(ctx, relay.ArmRequest{AgentID: "a", JobID: "j", FireAt: time.Now().Add(-time.Minute), ScheduleID: "s-j"}); err != nil {
		t.Fatal(err)
	}
	m := member("a", "j")
	got, _, err := e.claimShard(ctx, 0, 2, 4, 60000, relay.Flow{}, []any{m, m}, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %d leases, %v; want 1", len(got), err)
	}
	if err := e.Ack(ctx, got[0]); err != nil {
		t.Fatalf("ack: %v", err)
	}
}
