package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/nas/operator"
)

// TestDeadLettersFollowsPages: the client sends the token, the agent filter
// and each cursor, and returns every page's entries in order.
func TestDeadLettersFollowsPages(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer op-token-0123456789" || r.URL.Query().Get("agent_id") != "a" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"unauthorized","message":"no"}`))
			return
		}
		now := contract.NewTime(time.Now())
		entry := func(id string) []contract.DeadLetter {
			return []contract.DeadLetter{{ScheduleID: id, FireAt: now, FailedAt: now}}
		}
		next := "c2"
		page := contract.DLQListResponse{Entries: entry("s1"), NextCursor: &next}
		if r.URL.Query().Get("cursor") == "c2" {
			page = contract.DLQListResponse{Entries: entry("s2")}
		}
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	c, err := operator.New(srv.URL+"/", "op-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.DeadLetters(context.Background(), "a")
	if err != nil || len(got) != 2 || got[0].ScheduleID != "s1" || got[1].ScheduleID != "s2" {
		t.Fatalf("DeadLetters = %+v, %v", got, err)
	}
	_, err = c.DeadLetters(context.Background(), "b")
	var ce *contract.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("DeadLetters for another agent: %v, want NAS's 401 error", err)
	}
}

func TestResolveRefusesMissingSettings(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		src  operator.Source
		want string
	}{
		{operator.Source{Token: "t", Getenv: none}, "--nas-url"},
		{operator.Source{URL: "ftp://x", Token: "t", Getenv: none}, "http(s)"},
		{operator.Source{URL: "http://x", Getenv: none}, "--operator-token"},
		{operator.Source{ConfigFile: "nas.yaml", Getenv: none, LoadConfig: func(string) (nas.Config, error) {
			return nas.Config{}, errors.New("no such file")
		}}, "no such file"},
	} {
		if _, err := operator.Resolve(tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.src, err, tc.want)
		}
	}
}
