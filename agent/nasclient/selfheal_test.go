package nasclient_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// The list's first page says why jobs are unarmed and how the instance
// stands; the client hands both on.
func TestListCarriesLastFiresAndTheInstance(t *testing.T) {
	t.Parallel()
	stopped := contract.NewTime(slot.Add(-2 * time.Minute))
	b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		page := contract.ListResponse{Armed: []contract.ArmedJob{}, FailedFires: []contract.FailedFire{}}
		if r.URL.Query().Get("cursor") == "" {
			page.Unarmed = []contract.UnarmedJob{{JobID: "j1", FireAt: contract.NewTime(slot), ScheduleID: "s1",
				Outcome: contract.LastFireInstanceStopped, Reason: "the operator stopped instance i", OutcomeAt: contract.NewTime(slot)}}
			page.Instance = &contract.InstanceStatus{InstanceID: "i", Stopped: true, StoppedAt: &stopped}
		}
		contract.WriteJSON(w, http.StatusOK, page)
	})
	got, err := b.client.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Unarmed) != 1 || got.Unarmed[0].JobID != "j1" || got.Unarmed[0].Outcome != contract.LastFireInstanceStopped || !got.Unarmed[0].FireAt.Equal(slot) {
		t.Fatalf("unarmed %+v", got.Unarmed)
	}
	if in := got.Instance; in == nil || in.InstanceID != "i" || !in.Stopped || in.StoppedAt == nil || !in.StoppedAt.Equal(stopped.Time) || in.StartedAt != nil {
		t.Fatalf("instance %+v", got.Instance)
	}
}
