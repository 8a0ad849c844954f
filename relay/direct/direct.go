// Package direct delivers the fires of jobs armed for direct delivery
// (contract.DeliveryDirect): the dispatcher calls the agent itself, with a
// fire token it signs under the job's own cron key, and NAS is off the fire
// path. It serves every dispatcher: NAS's own (nas.LocalDeliverer hands it
// its direct fires) and those of chronos relay processes (Route sends a
// lease here or to the relay route by its delivery).
//
// A direct fire is delivered as NAS delivers a mediated one: the same body,
// a token with the same claims (iss NAS's issuer, aud the instance, purpose
// cron_fire, job_id, fire_at in the agent's spelling, schedule_id, attempt,
// bh, jti, iat, nbf, exp), the same guarded client and the same reading of
// the agent's answer (package agentcall), mapped to the same outcomes: a
// fire is retried, held for an agent that is down, dead-lettered and
// recorded as its job's last fire exactly as a mediated one. Neither the key
// nor the token is ever logged or put in an outcome.
package direct

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// FireCaller POSTs one fire to an agent and says what its answer means;
// *agentcall.Caller implements it.
type FireCaller interface {
	Fire(ctx context.Context, fireURL, token string, body []byte) agentcall.FireResult
}

var _ FireCaller = (*agentcall.Caller)(nil)

// Rows reads a fire's armed row and its instance's state again, for a lease
// that waited since its claim; relay.Engine implements it.
type Rows interface {
	Get(ctx context.Context, agentID, jobID string) (relay.OneShot, error)
	InstanceStopped(ctx context.Context, instanceID string) (bool, error)
}

// Config configures a Deliverer.
type Config struct {
	// Sealer opens the jobs' sealed cron keys (relay.cron_key_encryption_key_file).
	// Nil: a direct fire is retried with a reason that says so (another
	// dispatcher, configured with the key, may deliver it), and dead-lettered
	// once the retry policy is spent.
	Sealer *cronkey.Sealer
	// Issuer is the `iss` of the tokens: NAS's public_url, exactly as NAS
	// writes it in its own fire tokens. Required.
	Issuer string
	// Caller calls the agents. Required.
	Caller FireCaller
	// MaxAuthAttempts is how many deliveries of one fire the agent may
	// refuse the token (401, 403) before the fire is dead-lettered
	// (relay.retry.max_auth_attempts). Default 4.
	MaxAuthAttempts int
	// Rows, when set, re-reads the row of a lease claimed more than a
	// moment ago (see ClaimFresh): a fire cancelled, re-armed or whose
	// instance was stopped meanwhile is dropped. Nil: the row the claim
	// returned is used.
	Rows Rows
	// Logger receives the deliverer's few logs (never a key or a token).
	// Default slog.Default().
	Logger *slog.Logger
	// Now is the clock of the tokens and the last-fire records. Default
	// time.Now.
	Now func() time.Time
}

// ClaimFresh is how long after its claim a lease's row and stopped flag
// stand for the armed row (the claim read them atomically as it took the
// lease); a lease that waited longer is checked against Rows again.
const ClaimFresh = time.Second

// DefaultMaxAuthAttempts is Config.MaxAuthAttempts's default (NAS's
// relay.retry.max_auth_attempts default).
const DefaultMaxAuthAttempts = 4

// Errors of a direct fire that never reached the agent. Their text is safe
// to log and to record as a fire's reason: it names no key.
var (
	// ErrNoEncryptionKey: the process has no cron key encryption key.
	ErrNoEncryptionKey = errors.New("direct delivery: this process has no cron key encryption key (set relay.cron_key_encryption_key_file, the key NAS seals cron keys with)")
	// ErrKeyDoesNotOpen: the job's sealed cron key does not open under the
	// configured encryption key.
	ErrKeyDoesNotOpen = errors.New("direct delivery: the job's cron key does not open under relay.cron_key_encryption_key_file (another encryption key than NAS's, or the stored row was altered); re-key the agent (chronos agent rekey) or have the job armed again")
)

// refusedHint ends the reason of a fire whose direct token the agent kept
// refusing.
const refusedHint = "check that the agent holds the job's current cron key (chronos agent rekey issues new ones)"

// Deliverer delivers direct fires. It is safe for concurrent use.
type Deliverer struct {
	cfg       Config
	noKeyOnce sync.Once
}

var _ relay.Deliverer = (*Deliverer)(nil)

// New returns a Deliverer.
func New(cfg Config) (*Deliverer, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("direct delivery: Issuer (NAS's public_url) is required")
	}
	if cfg.Caller == nil {
		return nil, errors.New("direct delivery: Caller is required")
	}
	if cfg.MaxAuthAttempts < 0 {
		return nil, fmt.Errorf("direct delivery: MaxAuthAttempts %d must not be negative", cfg.MaxAuthAttempts)
	}
	if cfg.MaxAuthAttempts == 0 {
		cfg.MaxAuthAttempts = DefaultMaxAuthAttempts
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Deliverer{cfg: cfg}, nil
}

// Route returns a Deliverer that hands a lease armed for direct delivery
// (relay.DirectKey.IsDirect) to direct and any other to mediated.
func Route(direct *Deliverer, mediated relay.Deliverer) relay.Deliverer {
	return relay.DelivererFunc(func(ctx context.Context, l relay.Lease) relay.Outcome {
		if l.Direct.IsDirect() {
			return direct.Deliver(ctx, l)
		}
		return mediated.Deliver(ctx, l)
	})
}

// Deliver implements relay.Deliverer: it drops a fire whose job is no longer
// armed under the lease's schedule id, or whose instance the operator
// stopped (as NAS's relay route does), and otherwise calls the agent.
func (d *Deliverer) Deliver(ctx context.Context, l relay.Lease) relay.Outcome {
	row, stopped := l.OneShot, l.InstanceStopped
	if d.cfg.Rows != nil && (l.ClaimedAt.IsZero() || time.Since(l.ClaimedAt) >= ClaimFresh) {
		var found bool
		var err error
		row, found, stopped, err = d.read(ctx, l)
		if err != nil {
			return relay.Outcome{Kind: relay.Retry, Reason: fmt.Sprintf("direct delivery: %v", err)}
		}
		switch {
		case !found:
			return relay.Outcome{Kind: relay.Done, Reason: contract.RelayDropped + ": job is no longer armed"}
		case row.ScheduleID != l.ScheduleID:
			return relay.Outcome{Kind: relay.Done, Reason: contract.RelayDropped + ": job was re-armed"}
		}
	}
	if stopped {
		return relay.Outcome{Kind: relay.Done, Reason: contract.RelayInstanceStopped, Record: d.record(row, relay.LastFireInstanceStopped, "the operator stopped instance "+row.InstanceID)}
	}
	if !row.Direct.IsDirect() {
		// Switched to NAS-mediated delivery under the same schedule id
		// since the claim: the next claim routes it there.
		return relay.Outcome{Kind: relay.Retry, Reason: "the job was switched to NAS-mediated delivery"}
	}
	res, err := d.Fire(ctx, row, l.Attempt)
	if err != nil {
		return d.ErrorOutcome(err)
	}
	return d.outcome(row, res)
}

// read re-reads l's row and, when it is still l's fire, whether its
// instance is stopped.
func (d *Deliverer) read(ctx context.Context, l relay.Lease) (row relay.OneShot, found, stopped bool, err error) {
	row, err = d.cfg.Rows.Get(ctx, l.AgentID, l.JobID)
	switch {
	case errors.Is(err, relay.ErrNotFound):
		return relay.OneShot{}, false, false, nil
	case err != nil:
		return relay.OneShot{}, false, false, fmt.Errorf("reading the armed row: %w", err)
	case row.ScheduleID != l.ScheduleID:
		return row, true, false, nil
	}
	stopped, err = d.cfg.Rows.InstanceStopped(ctx, row.InstanceID)
	if err != nil {
		return relay.OneShot{}, false, false, fmt.Errorf("reading the instance's state: %w", err)
	}
	return row, true, stopped, nil
}

// Fire delivers the attempt-th delivery of row's fire to its agent: it opens
// the job's cron key, signs the fire token and POSTs the fire, and returns
// the agent's answer, with a refused token settled for the attempt (see
// agentcall.FireResult.AtAttemptHint). An error (ErrNoEncryptionKey,
// ErrKeyDoesNotOpen, a failure to sign) means the agent was not called; see
// ErrorOutcome.
func (d *Deliverer) Fire(ctx context.Context, row relay.OneShot, attempt int) (agentcall.FireResult, error) {
	if d.cfg.Sealer == nil {
		d.noKeyOnce.Do(func() {
			d.cfg.Logger.Error("direct delivery: a fire armed for direct delivery came, but this process has no cron key encryption key; its direct fires are retried, for a dispatcher that has it, until they are dead-lettered",
				"agent_id", row.AgentID, "job_id", row.JobID, "setting", "relay.cron_key_encryption_key_file")
		})
		return agentcall.FireResult{}, ErrNoEncryptionKey
	}
	key, err := d.cfg.Sealer.Open(row.AgentID, row.JobID, row.Direct.Sealed)
	if err != nil {
		return agentcall.FireResult{}, ErrKeyDoesNotOpen
	}
	fire := contract.FireRequest{JobID: row.JobID, FireAt: contract.NewTimeSpelled(row.FireAt, row.FireAtSpelling), ScheduleID: row.ScheduleID, Attempt: attempt}
	body := agentcall.FireBody(&fire)
	token, err := d.sign(key, row.InstanceID, &fire, body)
	clear(key.Secret)
	if err != nil {
		return agentcall.FireResult{}, err
	}
	res := d.cfg.Caller.Fire(ctx, agentcall.FireURL(row.CallbackURL), token, body)
	return res.AtAttemptHint(attempt, d.cfg.MaxAuthAttempts, refusedHint), nil
}

// sign returns the fire token of fire (whose body is body) under key: the
// claims of NAS's own fire tokens, a fresh jti, issued now, alive
// contract.DirectTokenLifetimeSeconds.
func (d *Deliverer) sign(key cronkey.Key, instanceID string, fire *contract.FireRequest, body []byte) (string, error) {
	var jti [16]byte
	if _, err := rand.Read(jti[:]); err != nil {
		return "", fmt.Errorf("direct delivery: token id: %w", err)
	}
	iat := d.cfg.Now().Truncate(time.Second)
	claims := &contract.FireClaims{
		TokenClaims: contract.TokenClaims{
			Issuer:    d.cfg.Issuer,
			Audience:  contract.Audience(instanceID),
			Purpose:   contract.PurposeCronFire,
			IssuedAt:  jwt.NewNumericDate(iat),
			NotBefore: jwt.NewNumericDate(iat),
			ExpiresAt: jwt.NewNumericDate(iat.Add(contract.DirectTokenLifetimeSeconds * time.Second)),
			ID:        base64.RawURLEncoding.EncodeToString(jti[:]),
		},
		JobID:      fire.JobID,
		FireAt:     fire.FireAt.Text(), // as in the body: the agent's own spelling
		ScheduleID: fire.ScheduleID,
		Attempt:    fire.Attempt,
		BodyHash:   contract.BodyHash(body),
	}
	token := signToken(key, claims)
	if token == "" {
		return "", errors.New("direct delivery: signing the fire token failed")
	}
	return token, nil
}

// ErrorOutcome is the outcome of a direct fire Fire could not send: a key
// that does not open is dead-lettered at once (no retry opens it), any
// other failure (no encryption key here, a failure to sign) is retried.
func (d *Deliverer) ErrorOutcome(err error) relay.Outcome {
	if errors.Is(err, ErrKeyDoesNotOpen) {
		return relay.Outcome{Kind: relay.Dead, Reason: err.Error()}
	}
	return relay.Outcome{Kind: relay.Retry, Reason: err.Error()}
}

// outcome maps the agent's answer to row's fire as NAS does for a mediated
// fire (its Verdict, and the relay's reading of its relay route's
// answers): delivered is Done with the
// job's last-fire record (but for "gone"), rejected is Dead, and a retry is
// a cold-start retry of an agent that is down when the agent did not answer
// or said it cannot take fires now.
func (d *Deliverer) outcome(row relay.OneShot, res agentcall.FireResult) relay.Outcome {
	switch res.Outcome {
	case agentcall.OutcomeDelivered:
		out := relay.Outcome{Kind: relay.Done, Reason: joinReason(contract.RelayDelivered, knownAgentStatus(res.AgentStatus))}
		if res.AgentStatus != contract.FireGone {
			out.Record = d.record(row, relay.LastFireDelivered, deliveredReason(res))
		}
		return out
	case agentcall.OutcomeRejected:
		return relay.Outcome{Kind: relay.Dead, Reason: joinReason("rejected by the agent", res.Reason)}
	}
	out := relay.Outcome{Kind: relay.Retry, RetryAfter: res.RetryAfter, Reason: res.Reason}
	if res.AgentDown() {
		out.ColdStart, out.AgentDown = true, true
	}
	return out
}

// record is the last-fire record of row's fire.
func (d *Deliverer) record(row relay.OneShot, outcome, reason string) *relay.LastFire {
	return &relay.LastFire{
		AgentID: row.AgentID, InstanceID: row.InstanceID, JobID: row.JobID, ScheduleID: row.ScheduleID,
		FireAt: row.FireAt, CallbackURL: row.CallbackURL, Outcome: outcome, Reason: reason, At: d.cfg.Now(),
	}
}

// knownAgentStatus returns the agent's status word when it is one of the
// fire statuses NAS reports back, else "".
func knownAgentStatus(s string) string {
	switch s {
	case contract.FireAccepted, contract.FireDuplicate, contract.FireGone, contract.FireRefreshed:
		return s
	}
	return ""
}

// deliveredReason is the last-fire reason of a delivered fire, as NAS
// writes it: "agent answered", the status and the agent's status word.
func deliveredReason(res agentcall.FireResult) string {
	r := "agent answered " + strconv.Itoa(res.HTTPStatus)
	if res.AgentStatus != "" {
		r += " " + res.AgentStatus
	}
	return r
}

// joinReason joins the non-empty parts with ": ".
func joinReason(parts ...string) string {
	out := ""
	for _, p := range parts {
		if p == "" {
			continue
		}
		if out != "" {
			out += ": "
		}
		out += p
	}
	return out
}
