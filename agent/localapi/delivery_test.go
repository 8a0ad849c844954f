package localapi_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/cronkeys"
	"github.com/chronoscron/chronos/contract"
)

// TestJobDelivery: a job's view says how its fires are delivered, direct
// for a job with a cron key and nas otherwise, and never shows the key.
func TestJobDelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, id := range []string{"direct-job", "nas-job"} {
		spec := `{"id": "` + id + `", "schedule": "every 1h", "payload": {"kind": "shell", "shell": {"command": "true"}}}`
		if code, body, _ := e.call(t, http.MethodPost, "/api/jobs", token, spec); code != http.StatusCreated {
			t.Fatalf("add %s: %d %s", id, code, body)
		}
	}
	keys, err := cronkeys.Open(e.home, cronkeys.Options{})
	if err != nil {
		t.Fatal(err)
	}
	secret := make([]byte, contract.CronKeyBytes)
	if _, err := rand.Read(secret); err != nil {
		t.Fatal(err)
	}
	key := base64.RawURLEncoding.EncodeToString(secret)
	if err := keys.Provisioned(context.Background(), "direct-job", time.Now().Add(time.Hour), contract.DeliveryDirect,
		contract.ProvisionResponse{Delivery: contract.DeliveryDirect, CronKeyID: "ck_test", CronKey: key}); err != nil {
		t.Fatal(err)
	}
	code, body, _ := e.call(t, http.MethodGet, "/api/jobs", token, "")
	if code != http.StatusOK {
		t.Fatalf("list: %d %s", code, body)
	}
	var list struct {
		Jobs []struct {
			ID       string `json:"id"`
			Delivery string `json:"delivery"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range list.Jobs {
		got[j.ID] = j.Delivery
	}
	if got["direct-job"] != "direct" || got["nas-job"] != "nas" {
		t.Fatalf("deliveries %v", got)
	}
	for _, path := range []string{"/api/jobs/direct-job", "/api/jobs/direct-job?reveal=env", "/api/jobs"} {
		code, body, _ := e.call(t, http.MethodGet, path, token, "")
		if code != http.StatusOK || strings.Contains(string(body), key) || strings.Contains(string(body), "ck_test") {
			t.Fatalf("%s: %d, the key or its id is in %s", path, code, body)
		}
		if path == "/api/jobs/direct-job" && !strings.Contains(string(body), `"delivery":"direct"`) {
			t.Fatalf("%s: no delivery in %s", path, body)
		}
	}
}
