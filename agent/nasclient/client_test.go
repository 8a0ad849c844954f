package nasclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/contract"
)

const token = "agent-token-1"

type bundle struct {
	srv    *httptest.Server
	client *nasclient.Client
	calls  atomic.Int64
}

// setup serves h (after checking the bearer token) and returns a client for it
// with fast retries.
func setup(t *testing.T, h func(n int64, w http.ResponseWriter, r *http.Request), tweak ...func(*nasclient.Config)) *bundle {
	t.Helper()
	b := &bundle{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := b.calls.Add(1)
		if got := r.Header.Get("Authorization"); got != "Bearer "+token {
			contract.WriteError(w, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "bad token %q", got))
			return
		}
		h(n, w, r)
	}))
	t.Cleanup(b.srv.Close)
	cfg := nasclient.Config{
		PortalURL:   b.srv.URL + "/",
		AccessToken: " " + token + "\n",
		Timeout:     2 * time.Second,
		MaxAttempts: 3,
		BaseBackoff: time.Millisecond,
		MaxBackoff:  5 * time.Millisecond,
		Logger:      slog.New(slog.DiscardHandler),
	}
	for _, f := range tweak {
		f(&cfg)
	}
	c, err := nasclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.client = c
	return b
}

var slot = time.Date(2026, 6, 18, 12, 34, 56, 0, time.UTC)

func TestProvisionSendsTheContractBody(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != contract.PathProvision {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		var req contract.ProvisionRequest
		if e := contract.DecodeRequest(w, r, 0, &req); e != nil {
			contract.WriteError(w, e)
			return
		}
		if req.DedupKey != req.JobID+":"+contract.FormatTime(req.FireAt.Time) {
			t.Errorf("dedup_key %q", req.DedupKey)
		}
		contract.WriteJSON(w, http.StatusOK, contract.ProvisionResponse{ScheduleID: "sch_1", FireAt: req.FireAt, Armed: true})
	})
	got, err := b.client.Provision(context.Background(), contract.ProvisionRequest{
		JobID: "j1", FireAt: contract.NewTime(slot.In(time.FixedZone("", 3600))), AgentCallbackURL: "https://agent.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.ScheduleID != "sch_1" || !got.FireAt.Equal(slot) || !got.Armed {
		t.Fatalf("answer %+v", got)
	}
}

func TestTypedErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status int
		code   string
		as     func(error) (*nasclient.APIError, bool)
	}{
		{http.StatusUnauthorized, contract.CodeUnauthenticated, func(err error) (*nasclient.APIError, bool) {
			var e *nasclient.UnauthorizedError
			ok := errors.As(err, &e)
			if !ok {
				return nil, false
			}
			return &e.APIError, true
		}},
		{http.StatusForbidden, contract.CodeInvalidClient, func(err error) (*nasclient.APIError, bool) {
			var e *nasclient.ForbiddenError
			ok := errors.As(err, &e)
			if !ok {
				return nil, false
			}
			return &e.APIError, true
		}},
		{http.StatusUnprocessableEntity, contract.CodeFireAtInPast, func(err error) (*nasclient.APIError, bool) {
			var e *nasclient.UnprocessableError
			ok := errors.As(err, &e)
			if !ok {
				return nil, false
			}
			return &e.APIError, true
		}},
		{http.StatusBadRequest, contract.CodeInvalidJobID, func(err error) (*nasclient.APIError, bool) {
			var e *nasclient.APIError
			return e, errors.As(err, &e)
		}},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
				contract.WriteError(w, contract.Errorf(tt.status, tt.code, "described %d", tt.status))
			})
			_, err := b.client.Provision(context.Background(), contract.ProvisionRequest{JobID: "j1", FireAt: contract.NewTime(slot), AgentCallbackURL: "https://a.example"})
			if err == nil {
				t.Fatal("no error")
			}
			e, ok := tt.as(err)
			if !ok {
				t.Fatalf("%T %v is not the typed error", err, err)
			}
			if e.StatusCode != tt.status || e.Code != tt.code || e.Description != fmt.Sprintf("described %d", tt.status) {
				t.Fatalf("error %+v", e)
			}
			var base *nasclient.APIError
			if !errors.As(err, &base) || base.Code != tt.code {
				t.Fatalf("not an *APIError underneath: %v", err)
			}
			if n := b.calls.Load(); n != 1 {
				t.Fatalf("%d calls; a refusal must not be retried", n)
			}
		})
	}
}

func TestTransientFailuresAreRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		fail func(w http.ResponseWriter)
	}{
		{"503", func(w http.ResponseWriter) {
			contract.WriteError(w, contract.Errorf(503, contract.CodeUnavailable, "busy"))
		}},
		{"502 without a body", func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }},
		{"429 without Retry-After", func(w http.ResponseWriter) {
			contract.WriteError(w, contract.Errorf(429, contract.CodeRateLimited, "slow down"))
		}},
		{"connection dropped", func(w http.ResponseWriter) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
				if n < 3 {
					tt.fail(w)
					return
				}
				contract.WriteJSON(w, http.StatusOK, contract.OKResponse{OK: true})
			})
			if err := b.client.Cancel(context.Background(), "j1"); err != nil {
				t.Fatal(err)
			}
			if n := b.calls.Load(); n != 3 {
				t.Fatalf("%d calls, want 3", n)
			}
		})
	}
}

func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		contract.WriteError(w, contract.Errorf(500, contract.CodeServerError, "internal error"))
	})
	err := b.client.Cancel(context.Background(), "j1")
	var e *nasclient.APIError
	if !errors.As(err, &e) || e.StatusCode != 500 {
		t.Fatalf("error %v", err)
	}
	if n := b.calls.Load(); n != 3 {
		t.Fatalf("%d calls, want MaxAttempts=3", n)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	var first time.Time
	b := setup(t, func(n int64, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			first = time.Now()
			w.Header().Set("Retry-After", "1")
			contract.WriteError(w, contract.Errorf(429, contract.CodeRateLimited, "slow down"))
			return
		}
		if d := time.Since(first); d < time.Second {
			t.Errorf("retried after %s, before Retry-After", d)
		}
		contract.WriteJSON(w, http.StatusOK, contract.OKResponse{OK: true})
	})
	if err := b.client.Cancel(context.Background(), "j1"); err != nil {
		t.Fatal(err)
	}
}

func TestLongRetryAfterEndsTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "120")
		contract.WriteError(w, contract.Errorf(429, contract.CodeRateLimited, "quota"))
	})
	start := time.Now()
	err := b.client.Cancel(context.Background(), "j1")
	var e *nasclient.RateLimitedError
	if !errors.As(err, &e) || e.RetryAfter != 120*time.Second || e.Code != contract.CodeRateLimited {
		t.Fatalf("error %v", err)
	}
	if time.Since(start) > time.Second || b.calls.Load() != 1 {
		t.Fatalf("waited %s over %d calls", time.Since(start), b.calls.Load())
	}
}

func TestEachAttemptTimesOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, func(_ int64, _ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the client leaving
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}, func(c *nasclient.Config) { c.Timeout = 50 * time.Millisecond; c.MaxAttempts = 2 })
	t.Cleanup(func() { close(release) })
	start := time.Now()
	if err := b.client.Cancel(context.Background(), "j1"); err == nil {
		t.Fatal("no error from a hanging NAS")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s", d)
	}
	if n := b.calls.Load(); n != 2 {
		t.Fatalf("%d calls, want 2", n)
	}
}

func TestCancelledContextStopsRetrying(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		cancel()
		contract.WriteError(w, contract.Errorf(503, contract.CodeUnavailable, "busy"))
	}, func(c *nasclient.Config) { c.MaxAttempts = 10; c.BaseBackoff = 50 * time.Millisecond })
	err := b.client.Cancel(ctx, "j1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v", err)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d calls", n)
	}
}

// List asks for everything in one call (no limit); a NAS that pages anyway
// is followed to its last page, still without a limit.
func TestListAsksForEverythingAndFollowsPages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		pageSize int // what the NAS answers per call; 0 = everything
		calls    int64
	}{
		{"one answer", 0, 1},
		{"a NAS that pages", 100, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const total = 250
			b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodGet || r.URL.Path != contract.PathList {
					t.Errorf("%s %s", r.Method, r.URL.Path)
				}
				if _, ok := r.URL.Query()["limit"]; ok {
					t.Errorf("limit %q sent", r.URL.Query().Get("limit"))
				}
				start, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Query().Get("cursor"), "c"))
				end := total
				if tc.pageSize > 0 {
					end = min(start+tc.pageSize, total)
				}
				var page contract.ListResponse
				page.Armed = []contract.ArmedJob{}
				page.FailedFires = []contract.FailedFire{}
				for i := start; i < end; i++ {
					page.Armed = append(page.Armed, contract.ArmedJob{JobID: fmt.Sprintf("j%03d", i), FireAt: contract.NewTime(slot), ScheduleID: "s", AgentCallbackURL: "https://a.example"})
				}
				if start == 0 {
					page.FailedFires = []contract.FailedFire{{JobID: "j007", FireAt: contract.NewTime(slot), ScheduleID: "s", Attempts: 5, Reason: "agent answered 500", FailedAt: contract.NewTime(slot)}}
				}
				if end < total {
					next := fmt.Sprintf("c%d", end)
					page.NextCursor = &next
				}
				contract.WriteJSON(w, http.StatusOK, page)
			})
			got, err := b.client.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Armed) != total || got.Armed[total-1].JobID != "j249" {
				t.Fatalf("%d armed", len(got.Armed))
			}
			if len(got.FailedFires) != 1 || got.FailedFires[0].Reason != "agent answered 500" {
				t.Fatalf("failed fires %+v", got.FailedFires)
			}
			if n := b.calls.Load(); n != tc.calls {
				t.Fatalf("%d calls, want %d", n, tc.calls)
			}
		})
	}
}

// An armed set too large for one answer is read in pages of 100.
func TestListFallsBackToPagesWhenTooLarge(t *testing.T) {
	t.Parallel()
	const total = 250
	var limits []string
	b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		limits = append(limits, q.Get("limit"))
		start, _ := strconv.Atoi(strings.TrimPrefix(q.Get("cursor"), "c"))
		end := total
		if q.Get("limit") != "" {
			n, _ := strconv.Atoi(q.Get("limit"))
			end = min(start+n, total)
		}
		page := contract.ListResponse{Armed: []contract.ArmedJob{}, FailedFires: []contract.FailedFire{}}
		for i := start; i < end; i++ {
			page.Armed = append(page.Armed, contract.ArmedJob{JobID: fmt.Sprintf("j%03d", i), FireAt: contract.NewTime(slot), ScheduleID: "s", AgentCallbackURL: "https://a.example"})
		}
		if end < total {
			next := fmt.Sprintf("c%d", end)
			page.NextCursor = &next
		}
		contract.WriteJSON(w, http.StatusOK, page)
	}, func(c *nasclient.Config) { c.MaxResponseBytes = 16 << 10 }) // about 150 entries
	got, err := b.client.List(context.Background())
	if err != nil || len(got.Armed) != total {
		t.Fatalf("list: %d armed, %v", len(got.Armed), err)
	}
	if fmt.Sprint(limits) != "[ 100 100 100]" {
		t.Fatalf("limits sent %q: one unpaged call, then pages of 100", limits)
	}
	if _, err := b.client.ListPage(context.Background(), 0, ""); !errors.Is(err, nasclient.ErrResponseTooLarge) {
		t.Fatalf("unpaged page: %v", err)
	}
}

// AckFailedFires posts the ids (at most 1000 per call) and sums what NAS
// acknowledged; a NAS without the route is ErrUnsupported; refusals are
// typed errors.
func TestAckFailedFires(t *testing.T) {
	t.Parallel()
	var got [][]string
	b := setup(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != contract.PathFailedFiresAck {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		var req contract.FailedFiresAckRequest
		if e := contract.DecodeRequest(w, r, 1<<20, &req); e != nil {
			contract.WriteError(w, e)
			return
		}
		if n == 1 { // a transient failure is retried
			contract.WriteError(w, contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "busy"))
			return
		}
		got = append(got, req.ScheduleIDs)
		contract.WriteJSON(w, http.StatusOK, contract.FailedFiresAckResponse{OK: true, Acknowledged: len(req.ScheduleIDs) - 1})
	})
	ids := make([]string, 1500)
	for i := range ids {
		ids[i] = fmt.Sprintf("sch_%d", i)
	}
	n, err := b.client.AckFailedFires(context.Background(), ids)
	if err != nil || n != 1498 {
		t.Fatalf("ack = %d, %v; want 1498", n, err)
	}
	if len(got) != 2 || len(got[0]) != 1000 || len(got[1]) != 500 || got[1][499] != "sch_1499" {
		t.Fatalf("sent %d calls", len(got))
	}

	for _, tc := range []struct {
		status      int
		unsupported bool
	}{{http.StatusNotFound, true}, {http.StatusMethodNotAllowed, true}, {http.StatusBadRequest, false}, {http.StatusForbidden, false}} {
		old := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
			contract.WriteError(w, contract.Errorf(tc.status, contract.CodeInvalidRequest, "no"))
		})
		_, err := old.client.AckFailedFires(context.Background(), []string{"sch_1"})
		var apiErr *nasclient.APIError
		if err == nil || errors.Is(err, nasclient.ErrUnsupported) != tc.unsupported || !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
			t.Fatalf("%d: error %v", tc.status, err)
		}
		if n := old.calls.Load(); n != 1 {
			t.Fatalf("%d: %d calls; a refusal is not retried", tc.status, n)
		}
	}
}

func TestListRefusesACursorLoop(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		next := "same"
		contract.WriteJSON(w, http.StatusOK, contract.ListResponse{Armed: []contract.ArmedJob{}, NextCursor: &next})
	})
	if _, err := b.client.List(context.Background()); err == nil || !strings.Contains(err.Error(), "repeated cursor") {
		t.Fatalf("error %v", err)
	}
}

func TestPutArmed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != contract.PathArmed {
			t.Errorf("%s %s", r.Method, r.URL.Path)
		}
		var req contract.PutArmedRequest
		if e := contract.DecodeRequest(w, r, contract.DefaultMaxBulkBodyBytes, &req); e != nil {
			contract.WriteError(w, e)
			return
		}
		out := contract.PutArmedResponse{Armed: []contract.ArmedJob{}, Created: []string{}, Updated: []string{}, Cancelled: []string{"old"}, Unchanged: []string{}}
		for _, a := range req.Armed {
			if a.DedupKey != a.JobID+":"+contract.FormatTime(a.FireAt.Time) {
				t.Errorf("dedup_key %q", a.DedupKey)
			}
			out.Created = append(out.Created, a.JobID)
		}
		contract.WriteJSON(w, http.StatusOK, out)
	})
	got, err := b.client.PutArmed(context.Background(), contract.PutArmedRequest{Armed: []contract.DesiredArm{
		{JobID: "a", FireAt: contract.NewTime(slot), AgentCallbackURL: "https://a.example"},
		{JobID: "b", FireAt: contract.NewTime(slot.Add(time.Hour)), AgentCallbackURL: "https://a.example"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got.Created, ",") != "a,b" || strings.Join(got.Cancelled, ",") != "old" {
		t.Fatalf("answer %+v", got)
	}
}

func TestResponseIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"armed":[],"next_cursor":null,"pad":"` + strings.Repeat("x", 8<<10) + `"}`))
	}, func(c *nasclient.Config) { c.MaxResponseBytes = 1 << 10 })
	if _, err := b.client.ListPage(context.Background(), 0, ""); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Fatalf("error %v", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []nasclient.Config{
		{PortalURL: "", AccessToken: "t"},
		{PortalURL: "nas.example", AccessToken: "t"},
		{PortalURL: "ftp://nas.example", AccessToken: "t"},
		{PortalURL: "https://nas.example", AccessToken: "  "},
	} {
		if _, err := nasclient.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// A Retry-After that outlasts the caller's deadline ends the call at once
// with NAS's answer, rather than waiting only to fail on the deadline.
func TestRetryAfterPastTheDeadlineEndsTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "5")
		contract.WriteError(w, contract.Errorf(503, contract.CodeUnavailable, "busy"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := b.client.Cancel(ctx, "j1")
	var e *nasclient.APIError
	if !errors.As(err, &e) || e.StatusCode != 503 || e.RetryAfter != 5*time.Second {
		t.Fatalf("error %v, want NAS's 503 with its Retry-After", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %s: it waited instead of giving up", d)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

// cancelOnRetry is a log handler that cancels a context when the client
// logs that it will retry: the client is then about to wait.
type cancelOnRetry struct {
	slog.Handler
	cancel context.CancelFunc
}

func (h cancelOnRetry) Enabled(context.Context, slog.Level) bool { return true }

func (h cancelOnRetry) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "nasclient: retrying" {
		h.cancel()
	}
	return nil
}

// A context that ends while the client waits to retry ends the call at once,
// with an error that names the call and carries both the context's end and
// NAS's last answer.
func TestContextEndingDuringTheWaitEndsTheCall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := setup(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		contract.WriteError(w, contract.Errorf(503, contract.CodeUnavailable, "busy"))
	}, func(c *nasclient.Config) {
		c.BaseBackoff, c.MaxBackoff = time.Hour, time.Hour
		c.Logger = slog.New(cancelOnRetry{Handler: slog.DiscardHandler, cancel: cancel})
	})
	start := time.Now()
	err := b.client.Cancel(ctx, "j1")
	var e *nasclient.APIError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.StatusCode != 503 ||
		!strings.HasPrefix(err.Error(), "nasclient: cancel: context canceled (last error: ") {
		t.Fatalf("error %v, want the call's cancellation with NAS's 503", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("took %s", d)
	}
	if n := b.calls.Load(); n != 1 {
		t.Fatalf("%d calls, want 1", n)
	}
}

// dates records what a client tells its clock.
type dates struct {
	mu  sync.Mutex
	got []time.Time
}

func (d *dates) ObserveDate(sent, received, date time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if received.Before(sent) {
		date = time.Time{}
	}
	d.got = append(d.got, date)
}

// TestAnswersDateIsObserved: every NAS answer's Date header, success or
// refusal, is handed to the clock with the host's send and receive times.
func TestAnswersDateIsObserved(t *testing.T) {
	t.Parallel()
	nasTime := time.Date(2030, 1, 1, 12, 2, 0, 0, time.UTC)
	clock := &dates{}
	b2 := setup(t, func(n int64, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", nasTime.Add(time.Duration(n)*time.Second).Format(http.TimeFormat))
		if n == 1 {
			contract.WriteError(w, contract.Errorf(http.StatusServiceUnavailable, contract.CodeUnavailable, "busy"))
			return
		}
		contract.WriteJSON(w, http.StatusOK, contract.ListResponse{})
	}, func(c *nasclient.Config) { c.Clock = clock })
	if _, err := b2.client.ListPage(context.Background(), 10, ""); err != nil {
		t.Fatal(err)
	}
	clock.mu.Lock()
	defer clock.mu.Unlock()
	want := []time.Time{nasTime.Add(time.Second), nasTime.Add(2 * time.Second)}
	if len(clock.got) != len(want) {
		t.Fatalf("observed %v, want %v", clock.got, want)
	}
	for i := range want {
		if !clock.got[i].Equal(want[i]) {
			t.Fatalf("observed %v, want %v", clock.got, want)
		}
	}
}
