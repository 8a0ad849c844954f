package nas

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chronoscron/chronos/agentcall"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

// Self-healing across an agent's sleep. NAS remembers each job's last fire
// outcome (delivered, dropped because the instance was stopped,
// dead-lettered) until the agent arms the job again or cancels it: a job left
// so for longer than unarmed_after is reported (chronos_nas_unarmed_jobs, the
// operator route, one warn log line), and the agent learns from its list why
// a slot of its never ran. When an operator starts a stopped instance again,
// NAS asks its agent to reconcile with a signed call to the callback the
// instance last armed with.

const (
	// lastFireRetention is how long a last fire record is kept while its
	// job stays unarmed; older ones are dropped (a one-shot job of an
	// agent that never cancels it would otherwise stay reported forever).
	lastFireRetention = 7 * 24 * time.Hour
	// maxUnarmed bounds one unarmed report.
	maxUnarmed = 10000
	// callbackRefresh is how often a NAS process writes an instance's
	// callback again although it did not change, so that a store that lost
	// its data learns it back.
	callbackRefresh = 10 * time.Minute
	// nudgeAttempts and nudgeBackoff bound a reconcile request: an agent
	// woken by it (socket activation) may refuse the first connection.
	nudgeAttempts = 5
	nudgeBackoff  = time.Second
)

// SelfHeal is the Service's part for the above: the last fires it records,
// the unarmed jobs it reports and the reconcile requests it sends.
type SelfHeal struct {
	*core
	unarmed prometheus.Gauge
	nudger  reconcileCaller
	// callbacks caches, per instance, the callback last written and when.
	callbacks sync.Map // instance id → callbackSeen

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

type callbackSeen struct {
	url string
	at  time.Time
}

// newSelfHeal sets up the unarmed gauge and the reconcile caller.
func newSelfHeal(c *core) *SelfHeal {
	s := &SelfHeal{core: c}
	s.unarmed = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chronos_nas_unarmed_jobs",
		Help: "Jobs left without an armed fire for longer than unarmed_after after their last fire was delivered, dropped (instance stopped) or dead-lettered.",
	})
	s.metrics.Registry.MustRegister(s.unarmed)
	if rc, ok := s.caller.(reconcileCaller); ok {
		s.nudger = rc
	} else {
		s.nudger = NewAgentCaller(s.policy, s.cfg.DeliveryTimeout)
	}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	return s
}

// close stops the background work (reconcile requests in flight) and waits
// for it.
func (s *SelfHeal) close() {
	s.bgCancel()
	s.bg.Wait()
	if c, ok := s.nudger.(*AgentCaller); ok {
		c.CloseIdle()
	}
}

// rememberCallback records the callback instanceID arms with, writing it to
// the store only when it changed or was written long ago by this process.
func (s *SelfHeal) rememberCallback(ctx context.Context, instanceID, callback string) {
	if instanceID == "" || callback == "" {
		return
	}
	now := s.now()
	if v, ok := s.callbacks.Load(instanceID); ok {
		if seen := v.(callbackSeen); seen.url == callback && now.Sub(seen.at) < callbackRefresh {
			return
		}
	}
	if err := s.engine.SetInstanceCallback(ctx, instanceID, callback); err != nil {
		// The arm succeeded; the callback is written again on the next one.
		s.log.WarnContext(ctx, "recording the instance's callback failed", "instance_id", instanceID, "error", err)
		return
	}
	s.callbacks.Store(instanceID, callbackSeen{url: callback, at: now})
}

// recordLastFire records the final outcome of a relayed fire of row. A
// failure is logged: the fire's own outcome stands.
func (s *SelfHeal) recordLastFire(ctx context.Context, row relay.OneShot, outcome, reason string) {
	err := s.engine.RecordLastFire(ctx, relay.LastFire{
		AgentID: row.AgentID, InstanceID: row.InstanceID, JobID: row.JobID, ScheduleID: row.ScheduleID,
		FireAt: row.FireAt, CallbackURL: row.CallbackURL, Outcome: outcome, Reason: reason, At: s.now(),
	})
	if err != nil {
		s.log.WarnContext(ctx, "recording the job's last fire failed", "agent_id", row.AgentID, "job_id", row.JobID,
			"schedule_id", row.ScheduleID, "outcome", outcome, "error", err)
	}
}

// listExtras returns what the first page of id's list carries besides the
// armed set: the jobs whose last fire has an outcome and that are not armed
// again since, and the state of id's instance.
func (s *SelfHeal) listExtras(ctx context.Context, id Identity) ([]contract.UnarmedJob, *contract.InstanceStatus, error) {
	fires, err := s.engine.LastFiresOf(ctx, id.AgentID, s.now().Add(-lastFireRetention))
	if err != nil {
		return nil, nil, fmt.Errorf("list last fires: %w", err)
	}
	var unarmed []contract.UnarmedJob
	for _, f := range fires {
		unarmed = append(unarmed, contract.UnarmedJob{
			JobID: f.JobID, FireAt: contract.NewTime(f.FireAt), ScheduleID: f.ScheduleID,
			Outcome: f.Outcome, Reason: f.Reason, OutcomeAt: contract.NewTime(f.At),
		})
	}
	if id.InstanceID == "" {
		return unarmed, nil, nil
	}
	info, err := s.engine.Instance(ctx, id.InstanceID)
	if err != nil {
		return nil, nil, fmt.Errorf("list instance: %w", err)
	}
	st := &contract.InstanceStatus{InstanceID: id.InstanceID, Stopped: info.Stopped}
	if !info.StoppedAt.IsZero() {
		t := contract.NewTime(info.StoppedAt)
		st.StoppedAt = &t
	}
	if !info.StartedAt.IsZero() {
		t := contract.NewTime(info.StartedAt)
		st.StartedAt = &t
	}
	return unarmed, st, nil
}

// Unarmed lists the jobs (of agentID, or of every agent when empty) left
// without an armed fire for longer than unarmed_after after their last
// fire, oldest first. It marks nothing: it is an operator's look. An agent
// NAS knows nothing of is 404.
func (s *SelfHeal) Unarmed(ctx context.Context, agentID string) (contract.UnarmedResponse, error) {
	if agentID != "" {
		if e := checkPathID("agent", agentID); e != nil {
			return contract.UnarmedResponse{}, e
		}
	}
	now := s.now()
	found, more, err := s.engine.Unarmed(ctx, relay.UnarmedQuery{
		AgentID: agentID, Before: now.Add(-s.cfg.UnarmedAfter), ExpireBefore: now.Add(-lastFireRetention), Max: maxUnarmed,
	})
	if err != nil {
		return contract.UnarmedResponse{}, fmt.Errorf("unarmed: %w", err)
	}
	if agentID != "" && len(found) == 0 {
		if err := s.checkAgentKnown(ctx, agentID); err != nil {
			return contract.UnarmedResponse{}, s.operatorErr("unarmed", err)
		}
	}
	resp := contract.UnarmedResponse{Unarmed: make([]contract.UnarmedJob, 0, len(found)), UnarmedAfter: s.cfg.UnarmedAfter.String(), Truncated: more}
	for _, f := range found {
		resp.Unarmed = append(resp.Unarmed, unarmedJob(f.LastFire))
	}
	return resp, nil
}

func unarmedJob(f relay.LastFire) contract.UnarmedJob {
	return contract.UnarmedJob{
		AgentID: f.AgentID, InstanceID: f.InstanceID, JobID: f.JobID, FireAt: contract.NewTime(f.FireAt),
		ScheduleID: f.ScheduleID, Outcome: f.Outcome, Reason: f.Reason, OutcomeAt: contract.NewTime(f.At),
	}
}

// UnarmedCheckInterval is how often WatchUnarmed looks: a quarter of
// unarmed_after, between 1 s and 1 min.
func (s *SelfHeal) UnarmedCheckInterval() time.Duration {
	return min(max(s.cfg.UnarmedAfter/4, time.Second), time.Minute)
}

// WatchUnarmed reports unarmed jobs until ctx ends: every
// UnarmedCheckInterval it counts them into chronos_nas_unarmed_jobs and
// logs one warn line per job the first time it is found (once across every
// NAS process sharing the store).
func (s *SelfHeal) WatchUnarmed(ctx context.Context) {
	t := time.NewTicker(s.UnarmedCheckInterval())
	defer t.Stop()
	for {
		if err := s.CheckUnarmed(ctx); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "checking for unarmed jobs failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckUnarmed runs one check of WatchUnarmed.
func (s *SelfHeal) CheckUnarmed(ctx context.Context) error {
	now := s.now()
	found, more, err := s.engine.Unarmed(ctx, relay.UnarmedQuery{
		Before: now.Add(-s.cfg.UnarmedAfter), ExpireBefore: now.Add(-lastFireRetention), Max: maxUnarmed, Mark: true,
	})
	if err != nil {
		return fmt.Errorf("unarmed: %w", err)
	}
	n := float64(len(found))
	if more {
		n++ // at least one more
	}
	s.unarmed.Set(n)
	for _, f := range found {
		if !f.New {
			continue
		}
		s.log.WarnContext(ctx, "job left without an armed fire after its last fire",
			"agent_id", f.AgentID, "instance_id", f.InstanceID, "job_id", f.JobID, "schedule_id", f.ScheduleID,
			"fire_at", contract.FormatTime(f.FireAt), "outcome", f.Outcome, "reason", f.Reason,
			"unarmed_for", now.Sub(f.At).Round(time.Second).String())
	}
	return nil
}

// nudge asks instanceID's agent, in the background, to reconcile: a
// cron_reconcile token signed like fire tokens, POSTed to the callback the
// instance last armed with, retried a few times while the agent cannot take
// it (waking, 5xx, connection refused).
func (s *SelfHeal) nudge(ctx context.Context, instanceID, reason string) {
	info, err := s.engine.Instance(ctx, instanceID)
	if err != nil {
		s.log.WarnContext(ctx, "reconcile request not sent: reading the instance failed; the agent heals on its own resync", "instance_id", instanceID, "error", err)
		return
	}
	if info.CallbackURL == "" {
		s.log.InfoContext(ctx, "reconcile request not sent: the instance never armed a fire", "instance_id", instanceID)
		return
	}
	body, err := reconcileBody(instanceID, reason)
	if err != nil {
		s.log.ErrorContext(ctx, "reconcile request not sent", "instance_id", instanceID, "error", err)
		return
	}
	url := ReconcileURL(info.CallbackURL)
	s.bg.Go(func() {
		ctx := s.bgCtx
		log := s.log.With("instance_id", instanceID, "url", url)
		delay := nudgeBackoff
		for attempt := 1; ; attempt++ {
			token, err := s.minter.MintReconcile(s.now(), instanceID, body)
			if err != nil {
				log.ErrorContext(ctx, "reconcile request not sent", "error", err)
				return
			}
			res := s.nudger.Reconcile(ctx, url, token, body)
			switch {
			case res.Outcome == agentcall.OutcomeDelivered:
				log.InfoContext(ctx, "agent asked to reconcile", "reason", reason, "attempt", attempt, "agent_status", res.AgentStatus)
				return
			case res.Outcome == agentcall.OutcomeRejected || attempt >= nudgeAttempts:
				log.WarnContext(ctx, "agent did not take the reconcile request; it heals on its own resync", "reason", res.Reason,
					"status", res.HTTPStatus, "attempt", attempt)
				return
			}
			wait := max(delay, res.RetryAfter)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			delay *= 2
		}
	})
}

// nudgeAgent asks the instances of agentID that hold armed fires to
// reconcile, giving reason (in the background, see nudge): an agent enabled
// again learns it at once, where its calls were refused while it was
// disabled, instead of at its next resync, and a re-keyed one provisions its
// direct jobs for their new keys. An agent with nothing armed is not asked:
// NAS knows no callback of it to ask.
func (s *SelfHeal) nudgeAgent(ctx context.Context, agentID, reason string) {
	items, _, err := s.engine.List(ctx, agentID, "", nudgeListLimit)
	if err != nil {
		s.log.WarnContext(ctx, "reconcile request not sent: listing the agent's fires failed; it heals on its own resync", "agent_id", agentID, "error", err)
		return
	}
	seen := make(map[string]bool, 1)
	for _, o := range items {
		if o.InstanceID == "" || seen[o.InstanceID] {
			continue
		}
		seen[o.InstanceID] = true
		s.nudge(ctx, o.InstanceID, reason)
	}
}

// nudgeListLimit is how many of an agent's armed fires nudgeAgent reads to
// find its instances (an agent has one instance, as a rule).
const nudgeListLimit = 100
