package nas

// The agent API: provision, cancel, list, the bulk armed set and the
// acknowledgement of failed fires, each for the agent Authorize identified.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// AgentAPI is the agent API: Authorize identifies the agent of a call, and
// the other methods serve that agent. It is safe for concurrent use.
type AgentAPI struct {
	*core
	flow   *Flow
	heal   *SelfHeal
	direct *directKeys
}

// checkArm validates one arm request and returns the normalised callback.
func (s *AgentAPI) checkArm(jobID string, fireAt contract.Time, callback, dedupKey string, flexSeconds int64, now time.Time) (string, *contract.Error) {
	if e := checkJobID(jobID); e != nil {
		return "", e
	}
	if flexSeconds < 0 || flexSeconds > contract.MaxFlexSeconds {
		return "", contract.BadRequest(contract.CodeInvalidRequest,
			"flex_seconds must be an integer from 0 to %d, not %d", contract.MaxFlexSeconds, flexSeconds)
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

// armRequest is the relay arm of one checked job of id: with a flexible
// window, the fire is first due at the agent's phase inside it
// (relay.FlexDue), so that the fires of many agents spread over their
// windows while each agent's own fires stay together.
func (s *AgentAPI) armRequest(ctx context.Context, id Identity, jobID string, fireAt contract.Time, callback string, flexSeconds int64) (relay.ArmRequest, error) {
	req := relay.ArmRequest{
		AgentID: id.AgentID, InstanceID: id.InstanceID, JobID: jobID,
		FireAt: fireAt.Time, FireAtSpelling: fireAt.Spelling(), CallbackURL: callback,
		ScheduleID: newScheduleID(), MaxArmed: s.cfg.Limits.MaxArmedPerAgent,
	}
	if flexSeconds > 0 {
		phase, err := s.flow.agentPhase(ctx, id.AgentID)
		if err != nil {
			return relay.ArmRequest{}, err
		}
		req.Flex = time.Duration(flexSeconds) * time.Second
		req.DueAt = relay.FlexDue(req.FireAt, req.Flex, phase)
	}
	return req, nil
}

// Provision arms (upserts) the one-shot of id's job. The same fire_at (and
// flex_seconds) again returns the same schedule id and writes nothing.
//
// A provision that asks for direct delivery (delivery: direct) of an agent
// the agents file allows it is armed for direct delivery under the job's
// cron key: the key its row holds when that was minted since the agent's
// rekey floor and within relay.cron_key_max_age, else a new one. The answer
// then carries delivery "direct", the key and its id. One that asks for
// direct delivery NAS does not allow, or for "nas", is armed NAS-mediated
// (a key the job held is retired) and answered delivery "nas". One that
// asks for nothing is answered as before delivery modes existed.
func (s *AgentAPI) Provision(ctx context.Context, id Identity, req contract.ProvisionRequest) (contract.ProvisionResponse, error) {
	if !contract.ValidDelivery(req.Delivery) {
		return contract.ProvisionResponse{}, contract.BadRequest(contract.CodeInvalidRequest,
			"delivery must be %q or %q (or left out), not %q", contract.DeliveryNAS, contract.DeliveryDirect, req.Delivery)
	}
	cb, e := s.checkArm(req.JobID, req.FireAt, req.AgentCallbackURL, req.DedupKey, req.FlexSeconds, s.now())
	if e != nil {
		return contract.ProvisionResponse{}, e
	}
	arm, err := s.armRequest(ctx, id, req.JobID, req.FireAt, cb, req.FlexSeconds)
	if err != nil {
		return contract.ProvisionResponse{}, fmt.Errorf("provision: %w", err)
	}
	var (
		res relay.ArmResult
		key cronkey.Key
	)
	if req.Delivery == contract.DeliveryDirect && s.direct.directAllowed(ctx, id.AgentID) {
		minted, err := s.direct.withCronKey(ctx, &arm)
		if err != nil {
			return contract.ProvisionResponse{}, err
		}
		res, key, err = s.direct.armDirect(ctx, arm, minted)
		if err != nil {
			return contract.ProvisionResponse{}, s.engineErr("provision", err)
		}
	} else if res, err = s.engine.Arm(ctx, arm); err != nil {
		return contract.ProvisionResponse{}, s.engineErr("provision", err)
	}
	s.direct.logRekeyed(ctx, res)
	if res.Changed {
		s.noteSummary(ctx, summaryArmed, 0)
		if s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.DebugContext(ctx, "armed", "agent_id", id.AgentID, "job_id", req.JobID,
				"schedule_id", res.OneShot.ScheduleID, "fire_at", contract.FormatTime(res.OneShot.FireAt), "replaced", res.Replaced)
		}
	}
	s.heal.rememberCallback(ctx, id.InstanceID, cb)
	resp := contract.ProvisionResponse{ScheduleID: res.OneShot.ScheduleID, FireAt: fireAt(res.OneShot), Armed: true}
	switch {
	case req.Delivery == "":
	case res.OneShot.Direct.IsDirect():
		resp.Delivery, resp.CronKey, resp.CronKeyID = contract.DeliveryDirect, key.Encoded(), key.ID
	default:
		resp.Delivery = contract.DeliveryNAS
	}
	return resp, nil
}

// Cancel removes id's job; an unknown job is a no-op.
func (s *AgentAPI) Cancel(ctx context.Context, id Identity, req contract.CancelRequest) (contract.OKResponse, error) {
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
func (s *AgentAPI) List(ctx context.Context, id Identity, limit int, cursor string) (contract.ListResponse, error) {
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
		if resp.Unarmed, resp.Instance, err = s.heal.listExtras(ctx, id); err != nil {
			return contract.ListResponse{}, s.engineErr("list", err)
		}
	}
	return resp, nil
}

// listAll reads every armed row of agentID after the engine cursor, in
// chunks, so that no single engine call holds the store for long.
func (s *AgentAPI) listAll(ctx context.Context, agentID, cursor string) ([]relay.OneShot, error) {
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
func (s *AgentAPI) AckFailedFires(ctx context.Context, id Identity, req contract.FailedFiresAckRequest) (contract.FailedFiresAckResponse, error) {
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

// armedJob is the list entry of o: never its cron key, only its mode.
func armedJob(o relay.OneShot) contract.ArmedJob {
	j := contract.ArmedJob{JobID: o.JobID, FireAt: fireAt(o), ScheduleID: o.ScheduleID, AgentCallbackURL: o.CallbackURL,
		FlexSeconds: int64(o.Flex / time.Second)}
	if o.Direct.IsDirect() {
		j.Delivery = contract.DeliveryDirect
	}
	return j
}

// PutArmed makes id's armed set equal to req: it validates every entry first
// (nothing is written on any error), cancels jobs not listed, then arms each
// listed job (an upsert per job).
func (s *AgentAPI) PutArmed(ctx context.Context, id Identity, req contract.PutArmedRequest) (contract.PutArmedResponse, error) {
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
	flex := false
	for i, d := range req.Armed {
		cb, e := s.checkArm(d.JobID, d.FireAt, d.AgentCallbackURL, d.DedupKey, d.FlexSeconds, now)
		if e != nil {
			e.Description = fmt.Sprintf("armed[%d]: %s", i, e.Description)
			return contract.PutArmedResponse{}, e
		}
		if _, dup := desired[d.JobID]; dup {
			return contract.PutArmedResponse{}, contract.BadRequest(contract.CodeInvalidRequest, "armed[%d]: job_id %q is listed twice", i, d.JobID)
		}
		desired[d.JobID] = d
		callbacks[d.JobID] = cb
		flex = flex || d.FlexSeconds > 0
	}
	if flex {
		// Read before anything is written: a phase the store cannot give
		// fails the call with nothing changed.
		if _, err := s.flow.agentPhase(ctx, id.AgentID); err != nil {
			return contract.PutArmedResponse{}, fmt.Errorf("put armed: %w", err)
		}
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
		arm, err := s.armRequest(ctx, id, jobID, d.FireAt, callbacks[jobID], d.FlexSeconds)
		if err != nil {
			return contract.PutArmedResponse{}, fmt.Errorf("put armed: %w", err)
		}
		// The bulk form carries no delivery mode and no key: a direct job
		// stays direct under the key it holds (a provision re-keys it).
		if held := existing[jobID].Direct; held.IsDirect() && s.direct.directAllowed(ctx, id.AgentID) {
			arm.Direct = held
		}
		res, err := s.engine.Arm(ctx, arm)
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
		s.heal.rememberCallback(ctx, id.InstanceID, callbacks[jobID])
	}
	sort.Strings(resp.Cancelled)
	s.log.InfoContext(ctx, "armed set replaced", "agent_id", id.AgentID, "created", len(resp.Created),
		"updated", len(resp.Updated), "cancelled", len(resp.Cancelled), "unchanged", len(resp.Unchanged))
	return resp, nil
}

// Authorize identifies the agent of an Authorization header and takes one
// token of its rate limit. Errors are *contract.Error: 401 unauthenticated
// (missing or malformed header), 401 invalid_token, 403 invalid_client (not
// a provisioned agent, or one the operator or the agents file disabled:
// known from memory, never from a store read that could fail), 429
// rate_limited with RetryAfter.
func (s *AgentAPI) Authorize(ctx context.Context, authorization string) (Identity, error) {
	token, ok := contract.BearerToken(authorization)
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
	if s.flow.AgentDisabled(id.AgentID) {
		return Identity{}, errAgentDisabled()
	}
	if allowed, wait := s.limiter.Allow(id.AgentID, s.now()); !allowed {
		e := contract.Errorf(http.StatusTooManyRequests, contract.CodeRateLimited, "too many calls; retry later")
		e.RetryAfter = wait
		return Identity{}, e
	}
	return id, nil
}
