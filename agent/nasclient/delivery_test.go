package nasclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

// TestProvisionDelivery: a client configured for direct delivery asks for
// it in every provision and hands back the answer's key; one configured for
// NAS-mediated delivery (or not at all) sends exactly the body of today.
func TestProvisionDelivery(t *testing.T) {
	t.Parallel()
	plain, err := json.Marshal(struct {
		JobID            string        `json:"job_id"`
		FireAt           contract.Time `json:"fire_at"`
		AgentCallbackURL string        `json:"agent_callback_url"`
		DedupKey         string        `json:"dedup_key"`
	}{"j1", contract.NewTime(slot), "https://agent.example", "j1:" + contract.FormatTime(slot)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		delivery string
		direct   bool
	}{
		{name: "default", delivery: ""},
		{name: "nas", delivery: contract.DeliveryNAS},
		{name: "direct", delivery: contract.DeliveryDirect, direct: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var body []byte
			b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				raw, _ := io.ReadAll(r.Body)
				mu.Lock()
				body = raw
				mu.Unlock()
				var req contract.ProvisionRequest
				_ = json.Unmarshal(raw, &req)
				resp := contract.ProvisionResponse{ScheduleID: "sch_1", FireAt: req.FireAt, Armed: true}
				if req.Delivery == contract.DeliveryDirect {
					resp.Delivery, resp.CronKeyID, resp.CronKey = contract.DeliveryDirect, "ck_1", "a2V5"
				}
				contract.WriteJSON(w, http.StatusOK, resp)
			}, func(c *nasclient.Config) { c.Delivery = tt.delivery })
			out, err := b.client.Provision(context.Background(), contract.ProvisionRequest{JobID: "j1", FireAt: contract.NewTime(slot), AgentCallbackURL: "https://agent.example"})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !tt.direct {
				if !bytes.Equal(body, plain) {
					t.Fatalf("body\n%s\nwant\n%s", body, plain)
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(body, &got); err != nil || got["delivery"] != "direct" {
				t.Fatalf("body %s: no delivery direct", body)
			}
			if out.Delivery != contract.DeliveryDirect || out.CronKeyID != "ck_1" || out.CronKey != "a2V5" {
				t.Fatalf("answer %+v", out)
			}
		})
	}
}
