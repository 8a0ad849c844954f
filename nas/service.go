package nas

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// FireCaller POSTs one fire to an agent and says what its answer means.
type FireCaller interface {
	Fire(ctx context.Context, fireURL, token string, body []byte) FireResult
}

var _ FireCaller = (*AgentCaller)(nil)

// Options are the parts a Service is built from.
type Options struct {
	// Config is the NAS configuration; New applies WithDefaults.
	Config Config
	// Engine is the relay store.
	Engine relay.Engine
	// Verifier identifies agents from their tokens.
	Verifier AgentVerifier
	// Keys are the fire-token signing keys.
	Keys *KeyRing
	// Logger receives JSON logs; default slog.Default().
	Logger *slog.Logger
	// Now is the service clock; default time.Now.
	Now func() time.Time
	// Caller calls agents; default NewAgentCaller with the config's SSRF
	// policy and delivery_timeout.
	Caller FireCaller
}

// Service is NAS's domain: agent API, relay route, operator actions. It is
// safe for concurrent use.
type Service struct {
	cfg      Config
	engine   relay.Engine
	verifier AgentVerifier
	keys     *KeyRing
	log      *slog.Logger
	now      func() time.Time
	caller   FireCaller
	policy   CallbackPolicy
	minter   *Minter
	secrets  [][]byte
	cursors  cursorSigner
	limiter  *agentLimiter
	metrics  *Metrics
	operator []byte
	heal     selfHeal
}

// New builds a Service. Config must validate after WithDefaults, except that
// no agent credential source is needed when Verifier is given. An unset
// signing_alg is the algorithm of Keys' signing key.
func New(opts Options) (*Service, error) {
	if opts.Engine == nil || opts.Verifier == nil || opts.Keys == nil || opts.Keys.Current() == nil {
		return nil, errors.New("nas: engine, verifier and keys are required")
	}
	cfg := opts.Config
	if cfg.SigningAlg == "" {
		cfg.SigningAlg = opts.Keys.Alg()
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("nas: %w", err)
	}
	if alg := opts.Keys.Current().Active.Alg; alg != cfg.SigningAlg {
		return nil, fmt.Errorf("nas: the signing key is %s but signing_alg is %s", alg, cfg.SigningAlg)
	}
	secrets := make([][]byte, 0, len(cfg.Relay.Secrets))
	for _, s := range cfg.Relay.Secrets {
		k, err := contract.ParseWebhookSecret(s)
		if err != nil {
			return nil, fmt.Errorf("nas: relay.secrets: %w", err)
		}
		secrets = append(secrets, k)
	}
	allow, err := ParseAllowlist(cfg.CallbackAllowlist)
	if err != nil {
		return nil, fmt.Errorf("nas: callback_allowlist: %w", err)
	}
	s := &Service{
		cfg:      cfg,
		engine:   opts.Engine,
		verifier: opts.Verifier,
		keys:     opts.Keys,
		log:      opts.Logger,
		now:      opts.Now,
		caller:   opts.Caller,
		policy:   CallbackPolicy{AllowPrivate: cfg.AllowPrivateCallbacks, Allow: allow},
		secrets:  secrets,
		cursors:  newCursorSigner(secrets),
		limiter:  newAgentLimiter(cfg.Limits.RatePerSecond, cfg.Limits.Burst),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.caller == nil {
		s.caller = NewAgentCaller(s.policy, cfg.DeliveryTimeout)
	}
	if cfg.OperatorToken != "" {
		s.operator = []byte(cfg.OperatorToken)
	}
	// iss is public_url exactly as configured: the agents compare it with
	// their portal_url, which operators copy from the same place.
	s.minter = &Minter{Keys: opts.Keys, Issuer: cfg.PublicURL, TTL: cfg.FireTokenTTL}
	s.metrics = newMetrics(opts.Engine)
	s.initSelfHeal()
	return s, nil
}

// Config returns the effective configuration.
func (s *Service) Config() Config { return s.cfg }

// Metrics returns the service's metrics.
func (s *Service) Metrics() *Metrics { return s.metrics }

// Keys returns the signing key ring.
func (s *Service) Keys() *KeyRing { return s.keys }

// JWKS returns the published keys as JSON.
func (s *Service) JWKS() []byte { return s.keys.Current().JWKS() }

// HasOperator reports whether the operator routes are enabled.
func (s *Service) HasOperator() bool { return len(s.operator) > 0 }

// Ready reports whether NAS can serve: keys are loaded, the engine answers
// and (on an engine that can lose its data under NAS, relay.StoreEpoch) no
// loss of the store's data is being reported: check "store_epoch".
func (s *Service) Ready(ctx context.Context) map[string]error {
	checks := map[string]error{"keys": nil, "store": nil}
	if set := s.keys.Current(); set == nil || set.Active == nil {
		checks["keys"] = errors.New("no signing key")
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, storeErr := s.engine.Stats(ctx)
	if storeErr != nil {
		checks["store"] = fmt.Errorf("store: %w", storeErr)
	}
	if ep, ok := s.engine.(relay.StoreEpoch); ok {
		checks["store_epoch"] = errors.New("not checked: the store did not answer")
		if storeErr == nil {
			checks["store_epoch"] = storeEpochCheck(ctx, ep)
		}
	}
	if r, ok := s.verifier.(readier); ok {
		checks["agent_keys"] = r.Ready(ctx)
	}
	return checks
}

// storeEpochCheck is the "store_epoch" readiness check: an error while a
// loss of the store's data is reported, or when it cannot be checked.
func storeEpochCheck(ctx context.Context, ep relay.StoreEpoch) error {
	st, err := ep.CheckEpoch(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("not checked: %w", err)
	case st.Lost:
		return fmt.Errorf("the store lost its data at %s (%s); armed fires may be gone until agents arm them again; reported until %s",
			st.Since.UTC().Format(time.RFC3339), st.Reason, st.Until.UTC().Format(time.RFC3339))
	}
	return nil
}

// ---- agent authentication ----

// Authorize identifies the agent of an Authorization header and takes one
// token of its rate limit. Errors are *contract.Error: 401 unauthenticated
// (missing or malformed header), 401 invalid_token, 403 invalid_client, 429
// rate_limited with RetryAfter.
func (s *Service) Authorize(ctx context.Context, authorization string) (Identity, error) {
	token, ok := bearer(authorization)
	if !ok {
		return Identity{}, contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing or malformed Authorization: Bearer header")
	}
	id, err := s.verifier.VerifyAgent(ctx, token)
	switch {
	case errors.Is(err, ErrUnknownAgent):
		return Identity{}, contract.Errorf(http.StatusForbidden, contract.CodeInvalidClient, "the token is not a provisioned agent")
	case err != nil:
		return Identity{}, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidToken, "the token could not be verified")
	}
	if allowed, wait := s.limiter.Allow(id.AgentID, s.now()); !allowed {
		e := contract.Errorf(http.StatusTooManyRequests, contract.CodeRateLimited, "too many calls; retry later")
		e.RetryAfter = wait
		return Identity{}, e
	}
	return id, nil
}

// bearer extracts the token of "Bearer <token>" (scheme case-insensitive).
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" || len(tok) > 8192 || strings.ContainsAny(tok, " \t\r\n") {
		return "", false
	}
	return tok, true
}

// ---- provision / cancel / list / bulk ----

var jobIDRe = regexp.MustCompile(contract.JobIDPattern)

func checkJobID(id string) *contract.Error {
	if !jobIDRe.MatchString(id) {
		return contract.BadRequest(contract.CodeInvalidJobID, "job_id must match %s", contract.JobIDPattern)
	}
	return nil
}

// checkArm validates one arm request and returns the normalised callback.
func (s *Service) checkArm(jobID string, fireAt contract.Time, callback, dedupKey string, now time.Time) (string, *contract.Error) {
	if e := checkJobID(jobID); e != nil {
		return "", e
	}
	if fireAt.IsZero() {
		return "", contract.BadRequest(contract.CodeInvalidFireAt, "fire_at is required")
	}
	dj, dt, ok := strings.Cut(dedupKey, ":")
	if !ok || dj != jobID {
		return "", contract.BadRequest(contract.CodeInvalidDedupKey, "dedup_key must be job_id:fire_at")
	}
	if t, err := contract.ParseTime(dt); err != nil || !t.Equal(fireAt.Time) {
		return "", contract.BadRequest(contract.CodeInvalidDedupKey, "dedup_key must be job_id:fire_at with the same instant as fire_at")
	}
	cb, e := s.policy.CheckCallbackURL(callback)
	if e != nil {
		return "", e
	}
	if fireAt.Before(now.Add(-s.cfg.Limits.PastSkew)) {
		return "", contract.Errorf(http.StatusUnprocessableEntity, contract.CodeFireAtInPast,
			"fire_at %s is more than %s in the past; run overdue jobs locally", fireAt, s.cfg.Limits.PastSkew)
	}
	if fireAt.After(now.Add(s.cfg.Limits.MaxFuture)) {
		return "", contract.Errorf(http.StatusUnprocessableEntity, contract.CodeFireAtTooFar,
			"fire_at %s is more than %s ahead", fireAt, s.cfg.Limits.MaxFuture)
	}
	return cb, nil
}

// newScheduleID returns a fresh random schedule id.
func newScheduleID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sch_" + hex.EncodeToString(b[:])
}

func (s *Service) engineErr(op string, err error) error {
	switch {
	case errors.Is(err, relay.ErrQuotaExceeded):
		return contract.Errorf(http.StatusUnprocessableEntity, contract.CodeQuotaExceeded,
			"the agent already has %d armed jobs", s.cfg.Limits.MaxArmedPerAgent)
	case errors.Is(err, relay.ErrInvalidCursor):
		return contract.BadRequest(contract.CodeInvalidCursor, "cursor is not one NAS issued to this agent")
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// Provision arms (upserts) the one-shot of id's job. The same fire_at again
// returns the same schedule id and writes nothing.
func (s *Service) Provision(ctx context.Context, id Identity, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	cb, e := s.checkArm(req.JobID, req.FireAt, req.AgentCallbackURL, req.DedupKey, s.now())
	if e != nil {
		return contract.ProvisionResponse{}, e
	}
	res, err := s.engine.Arm(ctx, relay.ArmRequest{
		AgentID: id.AgentID, InstanceID: id.InstanceID, JobID: req.JobID,
		FireAt: req.FireAt.Time, FireAtSpelling: req.FireAt.Spelling(), CallbackURL: cb,
		ScheduleID: newScheduleID(), MaxArmed: s.cfg.Limits.MaxArmedPerAgent,
	})
	if err != nil {
		return contract.ProvisionResponse{}, s.engineErr("provision", err)
	}
	if res.Changed {
		s.log.InfoContext(ctx, "armed", "agent_id", id.AgentID, "job_id", req.JobID,
			"schedule_id", res.OneShot.ScheduleID, "fire_at", contract.FormatTime(res.OneShot.FireAt), "replaced", res.Replaced)
	}
	s.rememberCallback(ctx, id.InstanceID, cb)
	return contract.ProvisionResponse{ScheduleID: res.OneShot.ScheduleID, FireAt: fireAt(res.OneShot), Armed: true}, nil
}

// fireAt is a one-shot's fire_at as NAS reports it to the agent: in the
// spelling the agent provisioned it with, byte for byte.
func fireAt(o relay.OneShot) contract.Time {
	return contract.NewTimeSpelled(o.FireAt, o.FireAtSpelling)
}

// Cancel removes id's job; an unknown job is a no-op.
func (s *Service) Cancel(ctx context.Context, id Identity, req contract.CancelRequest) (contract.OKResponse, error) {
	if e := checkJobID(req.JobID); e != nil {
		return contract.OKResponse{}, e
	}
	found, err := s.engine.Cancel(ctx, id.AgentID, req.JobID)
	if err != nil {
		return contract.OKResponse{}, s.engineErr("cancel", err)
	}
	// The agent meant it: a job it cancels is not one left unarmed.
	if err := s.engine.ForgetLastFire(ctx, id.AgentID, req.JobID); err != nil {
		return contract.OKResponse{}, s.engineErr("cancel", err)
	}
	if found {
		s.log.InfoContext(ctx, "cancelled", "agent_id", id.AgentID, "job_id", req.JobID)
	}
	return contract.OKResponse{OK: true}, nil
}

// listChunk is how many armed rows one engine call reads while an unpaged
// list gathers them all.
const listChunk = 1000

// List answers id's armed jobs. Without a limit (limit <= 0) it answers every
// armed job (after cursor, if given) in one page, with no next cursor: at
// most the agent's quota, unless the quota was lowered after the jobs were
// armed. With a limit it pages: at most limit jobs, clamped to
// contract.MaxListLimit, and a next cursor while more remain. The first page
// (no cursor) also carries the agent's failed fires: those dead-lettered
// within failed_fires_retention that it has not acknowledged, oldest first,
// at most contract.MaxFailedFires. Reading consumes nothing.
func (s *Service) List(ctx context.Context, id Identity, limit int, cursor string) (contract.ListResponse, error) {
	engineCursor := ""
	if cursor != "" {
		c, ok := s.cursors.Open(id.AgentID, cursor)
		if !ok {
			return contract.ListResponse{}, contract.BadRequest(contract.CodeInvalidCursor, "cursor is not one NAS issued to this agent")
		}
		engineCursor = c
	}
	var items []relay.OneShot
	next := ""
	if limit > 0 {
		var err error
		items, next, err = s.engine.List(ctx, id.AgentID, engineCursor, min(limit, contract.MaxListLimit))
		if err != nil {
			return contract.ListResponse{}, s.engineErr("list", err)
		}
	} else {
		var err error
		if items, err = s.listAll(ctx, id.AgentID, engineCursor); err != nil {
			return contract.ListResponse{}, err
		}
	}
	resp := contract.ListResponse{Armed: make([]contract.ArmedJob, 0, len(items)), FailedFires: []contract.FailedFire{}}
	for _, o := range items {
		resp.Armed = append(resp.Armed, armedJob(o))
	}
	if next != "" {
		c := s.cursors.Sign(id.AgentID, next)
		resp.NextCursor = &c
	}
	if cursor == "" {
		failed, err := s.engine.ListFailed(ctx, id.AgentID, s.cfg.FailedFiresRetention, contract.MaxFailedFires)
		if err != nil {
			return contract.ListResponse{}, s.engineErr("list failed fires", err)
		}
		for _, d := range failed {
			resp.FailedFires = append(resp.FailedFires, contract.FailedFire{
				JobID: d.JobID, FireAt: fireAt(d.OneShot), ScheduleID: d.ScheduleID,
				Attempts: d.Attempt, Reason: d.Reason, FailedAt: contract.NewTime(d.FailedAt),
			})
		}
		if resp.Unarmed, resp.Instance, err = s.listExtras(ctx, id); err != nil {
			return contract.ListResponse{}, s.engineErr("list", err)
		}
	}
	return resp, nil
}

// listAll reads every armed row of agentID after the engine cursor, in
// chunks, so that no single engine call holds the store for long.
func (s *Service) listAll(ctx context.Context, agentID, cursor string) ([]relay.OneShot, error) {
	var all []relay.OneShot
	for {
		items, next, err := s.engine.List(ctx, agentID, cursor, listChunk)
		if err != nil {
			return nil, s.engineErr("list", err)
		}
		all = append(all, items...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// AckFailedFires forgets the caller's failed fires with the given schedule
// ids: list no longer reports them (the dead letter keeps them). Ids that are
// unknown, of another agent, replayed or already acknowledged are ignored;
// the answer counts the others. 1 to contract.MaxFailedFires non-empty ids of
// at most 256 bytes; anything else is a 400 and changes nothing.
func (s *Service) AckFailedFires(ctx context.Context, id Identity, req contract.FailedFiresAckRequest) (contract.FailedFiresAckResponse, error) {
	switch n := len(req.ScheduleIDs); {
	case req.ScheduleIDs == nil:
		return contract.FailedFiresAckResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_ids is required")
	case n == 0 || n > contract.MaxFailedFires:
		return contract.FailedFiresAckResponse{}, contract.BadRequest(contract.CodeInvalidRequest,
			"schedule_ids must hold 1 to %d ids, not %d", contract.MaxFailedFires, n)
	}
	for i, sid := range req.ScheduleIDs {
		if sid == "" || len(sid) > 256 {
			return contract.FailedFiresAckResponse{}, contract.BadRequest(contract.CodeInvalidRequest,
				"schedule_ids[%d]: a schedule id is 1 to 256 bytes", i)
		}
	}
	n, err := s.engine.AckFailed(ctx, id.AgentID, s.cfg.FailedFiresRetention, req.ScheduleIDs)
	if err != nil {
		return contract.FailedFiresAckResponse{}, s.engineErr("ack failed fires", err)
	}
	if n > 0 {
		s.log.InfoContext(ctx, "failed fires acknowledged", "agent_id", id.AgentID, "acknowledged", n)
	}
	return contract.FailedFiresAckResponse{OK: true, Acknowledged: n}, nil
}

func armedJob(o relay.OneShot) contract.ArmedJob {
	return contract.ArmedJob{JobID: o.JobID, FireAt: fireAt(o), ScheduleID: o.ScheduleID, AgentCallbackURL: o.CallbackURL}
}

// PutArmed makes id's armed set equal to req: it validates every entry first
// (nothing is written on any error), cancels jobs not listed, then arms each
// listed job (an upsert per job).
func (s *Service) PutArmed(ctx context.Context, id Identity, req contract.PutArmedRequest) (contract.PutArmedResponse, error) {
	now := s.now()
	if req.Armed == nil {
		return contract.PutArmedResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "armed is required (an empty list cancels everything)")
	}
	if q := s.cfg.Limits.MaxArmedPerAgent; q > 0 && len(req.Armed) > q {
		return contract.PutArmedResponse{}, contract.Errorf(http.StatusUnprocessableEntity, contract.CodeQuotaExceeded,
			"%d jobs exceed the quota of %d armed jobs", len(req.Armed), q)
	}
	desired := make(map[string]contract.DesiredArm, len(req.Armed))
	callbacks := make(map[string]string, len(req.Armed))
	for i, d := range req.Armed {
		cb, e := s.checkArm(d.JobID, d.FireAt, d.AgentCallbackURL, d.DedupKey, now)
		if e != nil {
			e.Description = fmt.Sprintf("armed[%d]: %s", i, e.Description)
			return contract.PutArmedResponse{}, e
		}
		if _, dup := desired[d.JobID]; dup {
			return contract.PutArmedResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "armed[%d]: job_id %q is listed twice", i, d.JobID)
		}
		desired[d.JobID] = d
		callbacks[d.JobID] = cb
	}
	items, err := s.listAll(ctx, id.AgentID, "")
	if err != nil {
		return contract.PutArmedResponse{}, fmt.Errorf("put armed: %w", err)
	}
	existing := make(map[string]relay.OneShot, len(items))
	for _, o := range items {
		existing[o.JobID] = o
	}
	resp := contract.PutArmedResponse{Armed: []contract.ArmedJob{}, Created: []string{}, Updated: []string{}, Cancelled: []string{}, Unchanged: []string{}}
	for jobID := range existing {
		if _, keep := desired[jobID]; keep {
			continue
		}
		found, err := s.engine.Cancel(ctx, id.AgentID, jobID)
		if err != nil {
			return contract.PutArmedResponse{}, s.engineErr("put armed: cancel", err)
		}
		if found {
			resp.Cancelled = append(resp.Cancelled, jobID)
		}
	}
	jobIDs := make([]string, 0, len(desired))
	for j := range desired {
		jobIDs = append(jobIDs, j)
	}
	sort.Strings(jobIDs)
	for _, jobID := range jobIDs {
		d := desired[jobID]
		res, err := s.engine.Arm(ctx, relay.ArmRequest{
			AgentID: id.AgentID, InstanceID: id.InstanceID, JobID: jobID,
			FireAt: d.FireAt.Time, FireAtSpelling: d.FireAt.Spelling(), CallbackURL: callbacks[jobID],
			ScheduleID: newScheduleID(), MaxArmed: s.cfg.Limits.MaxArmedPerAgent,
		})
		if err != nil {
			return contract.PutArmedResponse{}, s.engineErr("put armed: arm", err)
		}
		_, existed := existing[jobID]
		switch {
		case !res.Changed:
			resp.Unchanged = append(resp.Unchanged, jobID)
		case existed || res.Replaced != "":
			resp.Updated = append(resp.Updated, jobID)
		default:
			resp.Created = append(resp.Created, jobID)
		}
		resp.Armed = append(resp.Armed, armedJob(res.OneShot))
		s.rememberCallback(ctx, id.InstanceID, callbacks[jobID])
	}
	sort.Strings(resp.Cancelled)
	s.log.InfoContext(ctx, "armed set replaced", "agent_id", id.AgentID, "created", len(resp.Created),
		"updated", len(resp.Updated), "cancelled", len(resp.Cancelled), "unchanged", len(resp.Unchanged))
	return resp, nil
}

// ---- relay route ----

// RelayHeaders are the Standard Webhooks headers of a relay call.
type RelayHeaders struct {
	ID, Timestamp, Signature string
}

// deliveryTTL is how long a delivery id is remembered: longer than the whole
// window in which its signature verifies (the tolerance both ways).
const deliveryTTL = 2*contract.WebhookTolerance + time.Minute

// Relay handles one signed relay call: body is the exact request body. A
// forged, stale or altered call is a 401 and changes nothing. The answer is
// a 200 RelayResponse (final for the relay) or a 502/503 *contract.Error
// with RetryAfter (retry); ClassifyAnswer says which the agent's answer is,
// and a refused fire token is retried until the call's attempt reaches
// relay.retry.max_auth_attempts.
func (s *Service) Relay(ctx context.Context, h RelayHeaders, body []byte) (contract.RelayResponse, error) {
	now := s.now()
	if err := contract.VerifyWebhook(s.secrets, h.ID, h.Timestamp, h.Signature, body, now, contract.WebhookTolerance); err != nil {
		s.log.WarnContext(ctx, "relay call refused", "reason", err.Error())
		return contract.RelayResponse{}, contract.Errorf(http.StatusUnauthorized, contract.CodeInvalidSignature, "relay signature does not verify")
	}
	req, e := decodeRelayRequest(body)
	if e != nil {
		return contract.RelayResponse{}, e
	}
	if req.ScheduleID == "" || req.AgentID == "" || req.FireAt.IsZero() || req.Attempt < 1 {
		return contract.RelayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_id, agent_id, job_id, fire_at and an attempt of at least 1 are required")
	}
	if e := checkJobID(req.JobID); e != nil {
		return contract.RelayResponse{}, e
	}
	// The fire's attributes are built only for records that are written:
	// a logger.With per fire costs a handler clone even when the level is off.
	logFire := func(level slog.Level, msg string, args ...any) {
		if !s.log.Enabled(ctx, level) {
			return
		}
		s.log.Log(ctx, level, msg, append([]any{"agent_id", req.AgentID, "job_id", req.JobID, "schedule_id", req.ScheduleID,
			"fire_at", req.FireAt.String(), "attempt", req.Attempt}, args...)...)
	}
	if req.Attempt > 1 {
		s.metrics.retries.Inc()
	}
	// The key carries the attempt: an exact replay of a signed call repeats
	// both, while each new attempt is a new delivery.
	info, err := s.lookupDelivery(ctx, "relay:"+h.ID+":"+strconv.Itoa(req.Attempt), req)
	if err != nil {
		return contract.RelayResponse{}, fmt.Errorf("relay: %w", err)
	}
	if !info.First {
		s.metrics.countDelivery(deliveryDuplicate)
		logFire(slog.LevelInfo, "relay duplicate")
		return contract.RelayResponse{Status: contract.RelayDuplicate}, nil
	}
	row := info.Row
	if !info.Found || row.ScheduleID != req.ScheduleID {
		s.metrics.countDelivery(deliveryDropped)
		reason := "job is no longer armed"
		if info.Found {
			reason = "job was re-armed"
		}
		logFire(slog.LevelInfo, "fire dropped", "reason", reason)
		return contract.RelayResponse{Status: contract.RelayDropped, Reason: reason}, nil
	}
	if info.Stopped {
		s.metrics.countDelivery(deliveryInstanceStopped)
		logFire(slog.LevelInfo, "fire dropped: instance stopped", "instance_id", row.InstanceID)
		s.recordLastFire(ctx, row, relay.LastFireInstanceStopped, "the operator stopped instance "+row.InstanceID)
		return contract.RelayResponse{Status: contract.RelayInstanceStopped}, nil
	}
	// fire_at in the agent's own spelling, in the body and the token alike.
	fire := contract.FireRequest{JobID: row.JobID, FireAt: fireAt(row), ScheduleID: row.ScheduleID, Attempt: req.Attempt}
	fireBody, err := json.Marshal(fire)
	if err != nil {
		return contract.RelayResponse{}, fmt.Errorf("relay: %w", err)
	}
	token, err := s.minter.Mint(now, FireToken{InstanceID: row.InstanceID, Fire: fire, Body: fireBody})
	if err != nil {
		return contract.RelayResponse{}, fmt.Errorf("relay: %w", err)
	}
	// A refused token is retried for a bounded number of attempts; the
	// attempt number comes from the relay, so the bound holds whichever
	// engine and dispatcher process delivers the fire.
	res := s.caller.Fire(ctx, FireURL(row.CallbackURL), token, fireBody).AtAttempt(req.Attempt, s.cfg.Relay.Retry.MaxAuthAttempts)
	switch res.Outcome {
	case OutcomeDelivered:
		lag := s.now().Sub(row.FireAt)
		s.metrics.fireLag.Observe(max(lag.Seconds(), 0))
		s.metrics.countDelivery(deliveryDelivered)
		logFire(slog.LevelInfo, "fire delivered", "agent_status", res.AgentStatus, "run_id", res.RunID, "lag_ms", lag.Milliseconds())
		resp := contract.RelayResponse{Status: contract.RelayDelivered}
		switch res.AgentStatus {
		case contract.FireAccepted, contract.FireDuplicate, contract.FireGone, contract.FireRefreshed:
			resp.AgentStatus = res.AgentStatus
		}
		if res.AgentStatus != contract.FireGone {
			// The agent re-arms the job itself; until it does, the job is
			// unarmed after this fire. (An agent that has no such job
			// wants it unarmed.)
			s.recordLastFire(ctx, row, relay.LastFireDelivered, "agent answered "+agentAnswer(res))
		}
		return resp, nil
	case OutcomeRejected:
		s.metrics.countDelivery(deliveryRejected)
		logFire(slog.LevelWarn, "fire rejected", "reason", res.Reason, "status", res.HTTPStatus)
		return contract.RelayResponse{Status: contract.RelayRejected, Reason: res.Reason}, nil
	default:
		s.metrics.countDelivery(deliveryRetry)
		logFire(slog.LevelWarn, "fire not taken; relay retries", "reason", res.Reason, "status", res.HTTPStatus, "cold_start", res.ColdStart)
		status := http.StatusBadGateway
		if res.ColdStart || res.HTTPStatus == http.StatusTooManyRequests {
			status = http.StatusServiceUnavailable
		}
		e := contract.Errorf(status, contract.CodeAgentUnavailable, "%s", res.Reason)
		e.RetryAfter = res.RetryAfter
		return contract.RelayResponse{}, e
	}
}

// decodeRelayRequest decodes a relay call's body as contract.DecodeBytes
// does. Dispatchers send exactly json.Marshal of the request, and a body that
// decodes and encodes back to the same bytes is one the strict decoder
// accepts with the same result (each key once, spelled as the wire spells
// it, nothing unknown, nothing null, a valid fire_at): that common case skips
// the strict decoder's token walk. Anything else gets its exact verdict.
func decodeRelayRequest(body []byte) (contract.RelayRequest, *contract.Error) {
	var req contract.RelayRequest
	if json.Unmarshal(body, &req) == nil {
		if again, err := json.Marshal(req); err == nil && bytes.Equal(again, body) {
			return req, nil
		}
	}
	req = contract.RelayRequest{}
	if e := contract.DecodeBytes(body, &req); e != nil {
		return contract.RelayRequest{}, e
	}
	return req, nil
}

// lookupDelivery records a delivery id and, the first time it is seen, reads
// the fire's row and whether its instance is stopped: in one call on an
// engine that offers relay.DeliveryLookup, else in up to three.
func (s *Service) lookupDelivery(ctx context.Context, id string, req contract.RelayRequest) (relay.DeliveryInfo, error) {
	if lk, ok := s.engine.(relay.DeliveryLookup); ok {
		return lk.LookupDelivery(ctx, id, deliveryTTL, req.AgentID, req.JobID)
	}
	var info relay.DeliveryInfo
	first, err := s.engine.FirstDelivery(ctx, id, deliveryTTL)
	if err != nil || !first {
		return info, err
	}
	info.First = true
	row, err := s.engine.Get(ctx, req.AgentID, req.JobID)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return info, nil
	case err != nil:
		return relay.DeliveryInfo{}, err
	}
	info.Found, info.Row = true, row
	if row.ScheduleID != req.ScheduleID {
		return info, nil // re-armed: dropped whatever the instance
	}
	info.Stopped, err = s.engine.InstanceStopped(ctx, row.InstanceID)
	return info, err
}

// ---- operator ----

// AuthorizeOperator checks an operator bearer token in constant time: 401
// unauthenticated without one, 403 forbidden for a wrong one, 404 when the
// operator routes are disabled.
func (s *Service) AuthorizeOperator(authorization string) error {
	if !s.HasOperator() {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no such route")
	}
	tok, ok := bearer(authorization)
	if !ok {
		return contract.Errorf(http.StatusUnauthorized, contract.CodeUnauthenticated, "missing or malformed Authorization: Bearer header")
	}
	if subtle.ConstantTimeCompare([]byte(tok), s.operator) != 1 {
		return contract.Errorf(http.StatusForbidden, contract.CodeForbidden, "wrong operator token")
	}
	return nil
}

func checkPathID(name, v string) *contract.Error {
	if v == "" || len(v) > 256 || strings.ContainsAny(v, "/\x00") {
		return contract.BadRequest(contract.CodeInvalidRequest, "%s must be 1 to 256 characters", name)
	}
	return nil
}

// SetInstanceStopped stops (fires are dropped, not retried) or starts an agent instance.
func (s *Service) SetInstanceStopped(ctx context.Context, instanceID string, stopped bool) (contract.InstanceStateResponse, error) {
	if e := checkPathID("instance_id", instanceID); e != nil {
		return contract.InstanceStateResponse{}, e
	}
	at := s.now()
	if err := s.engine.SetInstanceStopped(ctx, instanceID, stopped); err != nil {
		return contract.InstanceStateResponse{}, fmt.Errorf("instance state: %w", err)
	}
	if err := s.engine.NoteInstance(ctx, instanceID, stopped, at); err != nil {
		return contract.InstanceStateResponse{}, fmt.Errorf("instance state: %w", err)
	}
	s.log.InfoContext(ctx, "instance state changed", "instance_id", instanceID, "stopped", stopped)
	if !stopped {
		// Its agent may sleep with jobs whose fires were dropped meanwhile:
		// ask it to reconcile now rather than at its next resync.
		s.nudge(ctx, instanceID, contract.ReconcileReasonInstanceStarted)
	}
	return contract.InstanceStateResponse{InstanceID: instanceID, Stopped: stopped}, nil
}

// CancelAgent cancels every job of an agent.
func (s *Service) CancelAgent(ctx context.Context, agentID string) (contract.CancelAllResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.CancelAllResponse{}, e
	}
	n, err := s.engine.CancelAgent(ctx, agentID)
	if err != nil {
		return contract.CancelAllResponse{}, fmt.Errorf("cancel agent: %w", err)
	}
	s.log.InfoContext(ctx, "agent jobs cancelled", "agent_id", agentID, "cancelled", n)
	return contract.CancelAllResponse{AgentID: agentID, Cancelled: n}, nil
}

// ListDead pages the dead letter, optionally of one agent.
func (s *Service) ListDead(ctx context.Context, agentID, cursor string, limit int) (contract.DLQListResponse, error) {
	if limit <= 0 || limit > contract.MaxListLimit {
		limit = contract.MaxListLimit
	}
	items, next, err := s.engine.ListDead(ctx, agentID, cursor, limit)
	if err != nil {
		return contract.DLQListResponse{}, s.engineErr("list dead letter", err)
	}
	resp := contract.DLQListResponse{Entries: make([]contract.DeadLetter, 0, len(items))}
	for _, d := range items {
		resp.Entries = append(resp.Entries, contract.DeadLetter{
			ScheduleID: d.ScheduleID, AgentID: d.AgentID, JobID: d.JobID, FireAt: contract.NewTime(d.FireAt),
			Attempts: d.Attempt, Reason: d.Reason, FailedAt: contract.NewTime(d.FailedAt),
		})
	}
	if next != "" {
		resp.NextCursor = &next
	}
	return resp, nil
}

// Replay re-arms dead-lettered fires: the listed schedule ids, or all of one
// agent's.
func (s *Service) Replay(ctx context.Context, req contract.DLQReplayRequest) (contract.DLQReplayResponse, error) {
	var n int
	var err error
	switch {
	case len(req.ScheduleIDs) > 0 && req.AgentID != "":
		return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "give schedule_ids or agent_id, not both")
	case len(req.ScheduleIDs) > 0:
		if len(req.ScheduleIDs) > 10000 {
			return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "at most 10000 schedule_ids at once")
		}
		n, err = s.engine.Replay(ctx, req.ScheduleIDs)
	case req.AgentID != "":
		n, err = s.engine.ReplayAgent(ctx, req.AgentID)
	default:
		return contract.DLQReplayResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "schedule_ids or agent_id is required")
	}
	if err != nil {
		return contract.DLQReplayResponse{}, fmt.Errorf("replay: %w", err)
	}
	s.log.InfoContext(ctx, "dead letters replayed", "agent_id", req.AgentID, "replayed", n)
	return contract.DLQReplayResponse{Replayed: n}, nil
}
