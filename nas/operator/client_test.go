package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// TestInstanceAndCancelAllRoutes: stop, start and cancel-all POST the
// operator route of the id, escaped as one path segment, with the token, and
// return NAS's answer; NAS's 400 comes back as an invalid_request error.
func TestInstanceAndCancelAllRoutes(t *testing.T) {
	t.Parallel()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath())
		switch {
		case r.Header.Get("Authorization") != "Bearer op-token-0123456789":
			w.WriteHeader(http.StatusUnauthorized)
		case strings.Contains(r.URL.Path, "bad"):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid_request","message":"instance_id must be 1 to 256 characters"}`))
		case strings.HasSuffix(r.URL.Path, "/cancel-all"):
			_, _ = w.Write([]byte(`{"agent_id":"a b","cancelled":3}`))
		default:
			_, _ = fmt.Fprintf(w, `{"instance_id":"i/1","stopped":%v}`, strings.HasSuffix(r.URL.Path, "/stop"))
		}
	}))
	t.Cleanup(srv.Close)
	c, err := operator.New(srv.URL, "op-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if r, err := c.StopInstance(ctx, "i/1"); err != nil || !r.Stopped || r.InstanceID != "i/1" {
		t.Fatalf("StopInstance = %+v, %v", r, err)
	}
	if r, err := c.StartInstance(ctx, "i/1"); err != nil || r.Stopped {
		t.Fatalf("StartInstance = %+v, %v", r, err)
	}
	if r, err := c.CancelAll(ctx, "a b"); err != nil || r.Cancelled != 3 {
		t.Fatalf("CancelAll = %+v, %v", r, err)
	}
	want := []string{"POST /api/operator/instances/i%2F1/stop", "POST /api/operator/instances/i%2F1/start", "POST /api/operator/agents/a%20b/cancel-all"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("requests %q, want %q", got, want)
	}
	_, err = c.StopInstance(ctx, "bad")
	var ce *contract.Error
	if !errors.As(err, &ce) || ce.Code != contract.CodeInvalidRequest {
		t.Fatalf("StopInstance(bad) = %v, want NAS's invalid_request", err)
	}
}

// TestWriteTables: the dead letter and the unarmed jobs render as tables
// with every cell escaped, or say they are empty.
func TestWriteTables(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	if err := operator.WriteDeadLetters(&b, nil); err != nil || b.String() != "the dead letter is empty\n" {
		t.Fatalf("empty dead letter: %q %v", b.String(), err)
	}
	b.Reset()
	at := contract.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	err := operator.WriteDeadLetters(&b, []contract.DeadLetter{{ScheduleID: "s1", AgentID: "a", JobID: "j", FireAt: at, FailedAt: at, Attempts: 5, Reason: "agent said \x1b[31mno"}})
	lines := strings.Split(b.String(), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "SCHEDULE_ID") || !strings.Contains(lines[1], `\x1b[31mno`) || strings.Contains(b.String(), "\x1b") {
		t.Fatalf("dead letter table %q %v", b.String(), err)
	}
	b.Reset()
	now := at.Add(90 * time.Second)
	err = operator.WriteUnarmed(&b, contract.UnarmedResponse{UnarmedAfter: "10m0s", Truncated: true,
		Unarmed: []contract.UnarmedJob{{AgentID: "a", JobID: "j", FireAt: at, Outcome: "delivered", OutcomeAt: at}}}, now)
	if err != nil || !strings.Contains(b.String(), "1m30s") || !strings.HasSuffix(b.String(), "(more than 1; narrow with --agent)\n") {
		t.Fatalf("unarmed table %q %v", b.String(), err)
	}
}
