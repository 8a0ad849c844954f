package relaybench

import (
	"bytes"
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
// issuer, the instance's audience, the body hash; in a direct run, the HS256
// token under the job's cron key, as an agent that asked for direct delivery
// does), and records when each
// schedule id first arrived. Its own bookkeeping (finding an agent's
// verifier, reading the body, answering) is kept lean, so that what the
// bench measures is NAS and the verification an agent does.
type sink struct {
	issuer string
	jwks   []byte
	want   int64
	log    *slog.Logger

	verifiers sync.Map       // agent name → *agentVerifier
	nb        *neighbourhood // the run's neighbours, or nil
	keys      *cronKeys      // the agents' cron keys in a direct run, else nil

	mu         sync.Mutex
	first      map[string]time.Duration // schedule id → lag of its first arrival
	neighbours map[string]bool          // schedule ids of the neighbours' fires
	last       time.Time                // of the latest first arrival

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
		first: make(map[string]time.Duration, want),
		done:  make(chan struct{}),
	}
}

// instanceOf is the instance id of a bench agent.
func instanceOf(agent string) string { return "inst-" + agent }

// fireVerifier verifies one fire's token as an agent's fire handler does.
type fireVerifier interface {
	VerifyFire(ctx context.Context, token string, body []byte, req contract.FireRequest) error
}

// agentVerifier is one agent's verifier: NAS's tokens with the agent's
// JWTVerifier, and in a direct run its job keys' tokens in front of it, as
// an agent that asked for direct delivery verifies them
// (fireauth.DirectVerifier).
type agentVerifier struct {
	fireVerifier
	nas *fireauth.JWTVerifier
}

// verifier returns (making once) the verifier of agent's instance.
func (s *sink) verifier(agent string) (*agentVerifier, error) {
	if v, ok := s.verifiers.Load(agent); ok {
		return v.(*agentVerifier), nil
	}
	cfg := fireauth.Config{Issuer: s.issuer, Audience: contract.Audience(instanceOf(agent)), Logger: s.log}
	jv, err := fireauth.NewStatic(s.jwks, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench sink: %w", err)
	}
	v := &agentVerifier{fireVerifier: jv, nas: jv}
	if s.keys != nil {
		dv, err := fireauth.NewDirect(jv, s.keys.of(agent), cfg)
		if err != nil {
			jv.Close()
			return nil, fmt.Errorf("bench sink: %w", err)
		}
		v.fireVerifier = dv
	}
	if got, loaded := s.verifiers.LoadOrStore(agent, v); loaded {
		jv.Close() // another request made it first
		return got.(*agentVerifier), nil
	}
	return v, nil
}

// bodies are the buffers fire bodies are read into.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// errBodyTooLarge refuses a fire body over contract.DefaultMaxBodyBytes.
var errBodyTooLarge = errors.New("body too large")

// readBody reads r's body, of at most contract.DefaultMaxBodyBytes, into buf.
func readBody(r *http.Request, buf *bytes.Buffer) error {
	lr := io.LimitedReader{R: r.Body, N: contract.DefaultMaxBodyBytes + 1}
	if _, err := buf.ReadFrom(&lr); err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if buf.Len() > contract.DefaultMaxBodyBytes {
		return errBodyTooLarge
	}
	return nil
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
	buf := bodies.Get().(*bytes.Buffer)
	defer bodies.Put(buf)
	buf.Reset()
	if err := readBody(r, buf); err != nil {
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	if s.nb != nil && s.nb.hold(w, r, agent, now) {
		return
	}
	body := buf.Bytes()
	var fire contract.FireRequest
	if err := json.Unmarshal(body, &fire); err != nil || fire.JobID == "" {
		s.failed.Add(1)
		http.Error(w, "body", http.StatusBadRequest)
		return
	}
	v, err := s.verifier(agent)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	token, _ := contract.BearerToken(r.Header.Get(contract.HeaderAuthorization))
	if err := v.VerifyFire(r.Context(), token, body, fire); err != nil {
		s.failed.Add(1)
		answer(w, http.StatusUnauthorized, invalidTokenBody)
		return
	}
	s.verified.Add(1)
	s.arrived(w, agent, fire, now)
}

// arrived records a verified fire and answers it: accepted the first time
// its schedule id arrives, duplicate after.
func (s *sink) arrived(w http.ResponseWriter, agent string, fire contract.FireRequest, now time.Time) {
	lag := now.Sub(fire.FireAt.Time)
	s.mu.Lock()
	_, seen := s.first[fire.ScheduleID]
	if !seen {
		s.first[fire.ScheduleID] = lag
		s.last = now
		if s.nb != nil && s.nb.record(agent, lag) {
			if s.neighbours == nil {
				s.neighbours = map[string]bool{}
			}
			s.neighbours[fire.ScheduleID] = true
		}
	}
	n := int64(len(s.first))
	s.mu.Unlock()
	if seen {
		s.duplicates.Add(1)
		answer(w, http.StatusOK, duplicateBody)
		return
	}
	var out [256]byte
	answer(w, http.StatusAccepted, appendAccepted(out[:0], fire.JobID, fire.ScheduleID))
	if n >= s.want {
		s.doneOnce.Do(func() { close(s.done) })
	}
}

// jsonContentType is the Content-Type of every answer; the server only
// reads it.
var jsonContentType = []string{contract.MediaTypeJSON}

// Answers as json.Encoder writes them (a newline after the value).
var (
	invalidTokenBody = []byte(`{"error":"invalid_token"}`)
	duplicateBody    = []byte(`{"status":"` + contract.FireDuplicate + `"}` + "\n")
)

// answer writes a JSON answer.
func answer(w http.ResponseWriter, status int, body []byte) {
	w.Header()[contract.HeaderContentType] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// appendAccepted appends the accepted answer to a fire, as json.Encoder
// writes contract.FireResponse{Status: accepted, JobID: jobID, RunID: runID}.
func appendAccepted(dst []byte, jobID, runID string) []byte {
	dst = append(dst, `{"status":"`+contract.FireAccepted+`"`...)
	if jobID != "" {
		dst = contract.AppendJSONString(append(dst, `,"job_id":`...), jobID)
	}
	if runID != "" {
		dst = contract.AppendJSONString(append(dst, `,"run_id":`...), runID)
	}
	return append(dst, "}\n"...)
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

// othersLags returns the lags of the first arrivals of every fire but the
// neighbours'.
func (s *sink) othersLags() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	lags := make([]time.Duration, 0, len(s.first))
	for id, l := range s.first {
		if !s.neighbours[id] {
			lags = append(lags, l)
		}
	}
	return lags
}

// close releases the verifiers.
func (s *sink) close() {
	s.verifiers.Range(func(_, v any) bool {
		v.(*agentVerifier).nas.Close()
		return true
	})
}
