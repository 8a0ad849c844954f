package nasclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/contract"
)

// TestProvisionSendsFlexSeconds: a fire with a flexible window is
// provisioned with flex_seconds; one without sends no such key, so its body
// is exactly what a client that knows no windows sends.
func TestProvisionSendsFlexSeconds(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies [][]byte
	b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		bodies = append(bodies, raw)
		mu.Unlock()
		var req contract.ProvisionRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			contract.WriteError(w, contract.BadRequest(contract.CodeInvalidRequest, "%v", err))
			return
		}
		contract.WriteJSON(w, http.StatusOK, contract.ProvisionResponse{ScheduleID: "sch_" + req.JobID, FireAt: req.FireAt, Armed: true})
	})
	base := contract.ProvisionRequest{JobID: "j1", FireAt: contract.NewTime(slot), AgentCallbackURL: "https://agent.example"}
	withFlex := base
	withFlex.FlexSeconds = 600
	for _, req := range []contract.ProvisionRequest{withFlex, base} {
		if _, err := b.client.Provision(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	if len(bodies) != 2 {
		t.Fatalf("%d calls, want 2", len(bodies))
	}
	var got map[string]any
	if err := json.Unmarshal(bodies[0], &got); err != nil {
		t.Fatal(err)
	}
	if got["flex_seconds"] != float64(600) || got["fire_at"] != contract.FormatTime(slot) || got["job_id"] != "j1" {
		t.Fatalf("body with a window %s", bodies[0])
	}
	// Without a window: no key, and the very bytes of the contract body
	// without the field.
	want, err := json.Marshal(struct {
		JobID            string        `json:"job_id"`
		FireAt           contract.Time `json:"fire_at"`
		AgentCallbackURL string        `json:"agent_callback_url"`
		DedupKey         string        `json:"dedup_key"`
	}{base.JobID, base.FireAt, base.AgentCallbackURL, "j1:" + contract.FormatTime(slot)})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bodies[1], []byte("flex")) || !bytes.Equal(bodies[1], want) {
		t.Fatalf("body without a window\n%s\nwant\n%s", bodies[1], want)
	}
}

// TestPutArmedSendsFlexSeconds: the bulk armed set carries each arm's
// window, and none for an arm without one.
func TestPutArmedSendsFlexSeconds(t *testing.T) {
	t.Parallel()
	var got contract.PutArmedRequest
	var raw []byte
	b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		raw, _ = io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Error(err)
		}
		contract.WriteJSON(w, http.StatusOK, contract.PutArmedResponse{})
	})
	_, err := b.client.PutArmed(context.Background(), contract.PutArmedRequest{Armed: []contract.DesiredArm{
		{JobID: "flex", FireAt: contract.NewTime(slot), AgentCallbackURL: "https://agent.example", FlexSeconds: 86400},
		{JobID: "plain", FireAt: contract.NewTime(slot), AgentCallbackURL: "https://agent.example"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Armed) != 2 || got.Armed[0].FlexSeconds != 86400 || got.Armed[1].FlexSeconds != 0 || strings.Count(string(raw), "flex_seconds") != 1 {
		t.Fatalf("armed set %s", raw)
	}
}

// TestFlexOutOfRangeIsNotSent: a window NAS would refuse is refused before
// any call.
func TestFlexOutOfRangeIsNotSent(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		contract.WriteJSON(w, http.StatusOK, contract.ProvisionResponse{})
	})
	for _, flex := range []int64{-1, contract.MaxFlexSeconds + 1} {
		_, err := b.client.Provision(context.Background(), contract.ProvisionRequest{JobID: "j", FireAt: contract.NewTime(slot),
			AgentCallbackURL: "https://agent.example", FlexSeconds: flex})
		if err == nil || !strings.Contains(err.Error(), "flex_seconds") {
			t.Errorf("flex %d: %v, want a refusal", flex, err)
		}
		_, err = b.client.PutArmed(context.Background(), contract.PutArmedRequest{Armed: []contract.DesiredArm{{JobID: "j",
			FireAt: contract.NewTime(slot), AgentCallbackURL: "https://agent.example", FlexSeconds: flex}}})
		if err == nil || !strings.Contains(err.Error(), "flex_seconds") {
			t.Errorf("put armed, flex %d: %v, want a refusal", flex, err)
		}
	}
	if n := b.calls.Load(); n != 0 {
		t.Fatalf("%d calls reached NAS", n)
	}
}
