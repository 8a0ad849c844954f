package relaybench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronoscron/chronos/agent/fireauth"
	"github.com/chronoscron/chronos/contract"
)

// sink is the agent side of `chronos bench relay`: an HTTP server that
// answers fires for many agents at {base}/agents/{agent}/api/cron/fire,
// verifies every cron_fire token with the agent's own verifier (NAS's JWKS,
// issuer, the instance's audience, the body hash), and records when each
// schedule id first arrived.
type sink struct {
	issuer string
	jwks   []byte
	want   int64
	log    *slog.Logger

	mu        sync.Mutex
	verifiers map[string]*fireauth.JWTVerifier // by instance id
	first     map[string]time.Duration         // schedule id → lag of its first arrival
	last      time.Time                        // of the latest first arrival

	verified   atomic.Int64 // tokens that verified
	failed     atomic.Int64 // tokens that did not
	duplicates atomic.Int64 // verified fires of a schedule id seen before
	done       chan struct{}
	doneOnce   sync.Once
}

// newSink returns a sink expecting want distinct fires, verifying
// against jwks (fetched from NAS) for tokens issued by issuer.
func newSink(issuer string, jwks []byte, want int, log *slog.Logger) *sink {
	return &sink{
		issuer: issuer, jwks: jwks, want: int64(want), log: log,
		verifiers: map[string]*fireauth.JWTVerifier{},
		first:     make(map[string]time.Duration, want),
		done:      make(chan struct{}),
	}
}

// instanceOf is the instance id of a bench agent.
func instanceOf(agent string) string { return "inst-" + agent }

// verifier returns (making once) the verifier of instance.
func (s *sink) verifier(instance string) (*fireauth.JWTVerifier, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.verifiers[instance]; ok {
		return v, nil
	}
	v, err := fireauth.NewStatic(s.jwks, fireauth.Config{
		Issuer: s.issuer, Audience: contract.Audience(instance), Logger: s.log,
	})
	if err != nil {
		return nil, fmt.Errorf("bench sink: %w", err)
	}
	s.verifiers[instance] = v
	return v, nil
}

// ServeHTTP answers one fire like an agent: 202 accepted the first time a
// schedule id arrives, 200 duplicate after, 401 for a token that fails.
func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	rest, ok := strings.CutPrefix(r.URL.Path, "/agents/")
	agent, tail, _ := strings.Cut(rest, "/")
	if !ok || r.Method != http.MethodPost || "/"+tail != contract.PathFire || agent == "" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, contract.DefaultMaxBodyBytes))
	if err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	var fire contract.FireRequest
	if err := json.Unmarshal(body, &fire); err != nil || fire.JobID == "" {
		s.failed.Add(1)
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	v, err := s.verifier(instanceOf(agent))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	token, _ := contract.BearerToken(r.Header.Get(contract.HeaderAuthorization))
	if err := v.VerifyFire(r.Context(), token, body, fire); err != nil {
		s.failed.Add(1)
		w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"error":"invalid_token"}`)
		return
	}
	s.verified.Add(1)
	lag := now.Sub(fire.FireAt.Time)
	s.mu.Lock()
	_, seen := s.first[fire.ScheduleID]
	if !seen {
		s.first[fire.ScheduleID] = lag
		s.last = now
	}
	n := int64(len(s.first))
	s.mu.Unlock()
	w.Header().Set(contract.HeaderContentType, contract.MediaTypeJSON)
	if seen {
		s.duplicates.Add(1)
		_ = json.NewEncoder(w).Encode(contract.FireResponse{Status: contract.FireDuplicate})
		return
	}
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(contract.FireResponse{Status: contract.FireAccepted, JobID: fire.JobID, RunID: fire.ScheduleID})
	if n >= s.want {
		s.doneOnce.Do(func() { close(s.done) })
	}
}

// wait blocks until every expected fire arrived, or ctx ends.
func (s *sink) wait(ctx context.Context) error {
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return errors.New("not every fire arrived in time")
	}
}

// results returns the lags of first arrivals and the time of the last one.
func (s *sink) results() ([]time.Duration, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lags := make([]time.Duration, 0, len(s.first))
	for _, l := range s.first {
		lags = append(lags, l)
	}
	return lags, s.last
}

// close releases the verifiers.
func (s *sink) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.verifiers {
		v.Close()
	}
}
