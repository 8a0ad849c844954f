package relaytest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// Call is one relay call a RelayRoute received.
type Call struct {
	Req contract.RelayRequest
	// ID is the call's webhook-id.
	ID string
	// At is when the call arrived; Finished when its answer was written.
	At, Finished time.Time
	// CtxErr is the request context's error once the answer was decided:
	// non-nil when the caller gave up (cancelled the call) first.
	CtxErr error
}

// Reply is a RelayRoute's answer to one call.
type Reply struct {
	Status     int
	RetryAfter string
	Body       string
	// Hold is how long the "agent" takes before the answer.
	Hold time.Duration
	// Gate, when set, holds the answer until a receive from it succeeds or
	// the caller cancels the call.
	Gate chan struct{}
}

// Delivered is NAS's answer for a fire the agent accepted.
var Delivered = Reply{Status: http.StatusOK, Body: `{"status":"delivered","agent_status":"accepted"}`}

// AnswerFunc decides the answer to a call; n counts the calls for the same
// schedule id so far, from 1.
type AnswerFunc func(req contract.RelayRequest, n int) Reply

// RelayRoute is a stand-in for NAS's relay route on a loopback HTTP server.
// It verifies each call's Standard Webhooks signature against its keys
// (answering 401 invalid_signature when none matches), records the calls and
// measures how many run at once, overall and per agent. It is safe for
// concurrent use.
type RelayRoute struct {
	srv    *httptest.Server
	keys   [][]byte
	answer AnswerFunc

	mu        sync.Mutex
	calls     []Call
	perID     map[string]int
	active    map[string]int
	maxActive map[string]int
	all       int
	maxAll    int
	badSigs   int
	arrived   chan Call
}

// NewRelayRoute starts a stand-in that accepts calls signed with any of keys
// and answers with answer; it stops at the end of the test.
func NewRelayRoute(t testing.TB, keys [][]byte, answer AnswerFunc) *RelayRoute {
	t.Helper()
	r := &RelayRoute{
		keys: keys, answer: answer,
		perID: map[string]int{}, active: map[string]int{}, maxActive: map[string]int{},
		arrived: make(chan Call, 4096),
	}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the base URL to give an HTTPDeliverer as NASURL.
func (r *RelayRoute) URL() string { return r.srv.URL }

func (r *RelayRoute) serve(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	body, err := io.ReadAll(req.Body)
	if err != nil || req.URL.Path != contract.PathRelay || req.Method != http.MethodPost {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if err := contract.VerifyWebhook(contract.WebhookCall{ID: req.Header.Get(contract.HeaderWebhookID), Timestamp: req.Header.Get(contract.HeaderWebhookTimestamp), Signature: req.Header.Get(contract.HeaderWebhookSignature), Body: body},
		contract.WebhookVerifyOptions{Keys: r.keys, Now: time.Now()}); err != nil {
		r.mu.Lock()
		r.badSigs++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":"invalid_signature"}`))
		return
	}
	var rr contract.RelayRequest
	if err := contract.DecodeBytes(body, &rr); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.perID[rr.ScheduleID]++
	n := r.perID[rr.ScheduleID]
	r.active[rr.AgentID]++
	r.maxActive[rr.AgentID] = max(r.maxActive[rr.AgentID], r.active[rr.AgentID])
	r.all++
	r.maxAll = max(r.maxAll, r.all)
	r.mu.Unlock()

	rep := r.answer(rr, n)
	if rep.Gate != nil {
		select {
		case <-rep.Gate:
		case <-req.Context().Done():
		}
	}
	if rep.Hold > 0 {
		time.Sleep(rep.Hold) // the agent doing its work
	}
	c := Call{Req: rr, ID: req.Header.Get(contract.HeaderWebhookID), At: at, Finished: time.Now(), CtxErr: req.Context().Err()}
	r.mu.Lock()
	r.active[rr.AgentID]--
	r.all--
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	if rep.RetryAfter != "" {
		w.Header().Set(contract.HeaderRetryAfter, rep.RetryAfter)
	}
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	w.WriteHeader(rep.Status)
	_, _ = w.Write([]byte(rep.Body))
	r.arrived <- c
}

// Calls returns the calls answered so far, in the order they finished.
func (r *RelayRoute) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// Wait receives the next count answered calls, failing t if they do not all
// come within timeout.
func (r *RelayRoute) Wait(t testing.TB, count int, timeout time.Duration) []Call {
	t.Helper()
	var got []Call
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for len(got) < count {
		select {
		case c := <-r.arrived:
			got = append(got, c)
		case <-deadline.C:
			t.Fatalf("got %d relay calls within %s, want %d", len(got), timeout, count)
		}
	}
	return got
}

// InFlight is how many calls are being answered now.
func (r *RelayRoute) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all
}

// PerID returns how many calls each schedule id received.
func (r *RelayRoute) PerID() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.perID))
	for k, v := range r.perID {
		out[k] = v
	}
	return out
}

// MaxActive is the most calls seen at once for agent, and overall.
func (r *RelayRoute) MaxActive(agent string) (forAgent, overall int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxActive[agent], r.maxAll
}

// BadSignatures is how many calls failed signature verification.
func (r *RelayRoute) BadSignatures() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.badSigs
}
