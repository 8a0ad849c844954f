package nas

// Direct delivery (contract.DeliveryDirect): the per-job cron key NAS mints
// at provision for an agent the agents file allows it, seals for the store
// (relay.OneShot.Direct) and answers to the agent, and the operator's
// re-key. The key itself is never logged, counted or listed: only its id
// appears in log lines.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// directState is the Service's part for direct delivery.
type directState struct {
	// sealer seals cron keys for the store; nil without
	// relay.cron_key_encryption_key_file (no agent gets direct delivery).
	sealer *cronkey.Sealer
	// warned holds the agents whose direct delivery the agents file allows
	// but that were armed NAS-mediated for want of the encryption key
	// (logged once per agent).
	warned sync.Map
}

// errNoCronKeyFile is New's refusal of an agents file that allows direct
// delivery when no encryption key is configured.
func errNoCronKeyFile(agentID string) error {
	return fmt.Errorf("relay.cron_key_encryption_key_file: required, because the agents file allows agent %s direct delivery (delivery: direct): "+
		"make a key with `head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE` and name FILE there, or remove delivery: direct", agentID)
}

// initDirect loads the encryption key of cron keys and refuses an agents
// file that allows an agent direct delivery without one.
func (s *Service) initDirect(src AgentPolicySource) error {
	sealer, err := s.cfg.CronKeySealer()
	if err != nil {
		return err
	}
	s.direct.sealer = sealer
	if sealer != nil || src == nil {
		return nil
	}
	policies, _ := src.AgentPolicies()
	var first string
	for a, p := range policies {
		if p.Direct && (first == "" || a < first) {
			first = a
		}
	}
	if first != "" {
		return errNoCronKeyFile(first)
	}
	return nil
}

// directAllowed reports whether the agents file allows agentID direct
// delivery and NAS can seal its keys. An agents file reloaded with a new
// direct agent while NAS has no encryption key arms it NAS-mediated and
// says so once.
func (s *Service) directAllowed(ctx context.Context, agentID string) bool {
	if s.flow.source == nil {
		return false
	}
	policies, _ := s.flow.source.AgentPolicies()
	if !policies[agentID].Direct {
		return false
	}
	if s.direct.sealer == nil {
		if _, seen := s.direct.warned.LoadOrStore(agentID, true); !seen {
			s.log.WarnContext(ctx, "the agents file allows the agent direct delivery, but relay.cron_key_encryption_key_file is not set: its fires are armed NAS-mediated until NAS restarts with it",
				"agent_id", agentID)
		}
		return false
	}
	return true
}

// withCronKey makes arm a direct arm of id's job: a freshly minted key,
// sealed for the job, which the store keeps only when the job's row holds no
// key minted since the agent's rekey floor and within
// relay.cron_key_max_age. It returns the fresh key.
func (s *Service) withCronKey(ctx context.Context, arm *relay.ArmRequest) (cronkey.Key, error) {
	floor, err := s.engine.RekeyFloor(ctx, arm.AgentID)
	if err != nil {
		return cronkey.Key{}, s.engineErr("provision: rekey floor", err)
	}
	now := s.now()
	keepFrom := now.Add(-s.cfg.Relay.CronKeyMaxAge)
	if floor.After(keepFrom) {
		keepFrom = floor
	}
	return s.sealFresh(arm, now, keepFrom)
}

// sealFresh mints a key for arm's job, seals it and sets arm.Direct and
// arm.KeepKeyFrom.
func (s *Service) sealFresh(arm *relay.ArmRequest, now, keepFrom time.Time) (cronkey.Key, error) {
	key, err := cronkey.Mint()
	if err != nil {
		return cronkey.Key{}, fmt.Errorf("provision: %w", err)
	}
	sealed, err := s.direct.sealer.Seal(arm.AgentID, arm.JobID, key)
	if err != nil {
		return cronkey.Key{}, fmt.Errorf("provision: %w", err)
	}
	// Whole milliseconds, as the store keeps it.
	arm.Direct = relay.DirectKey{Sealed: sealed, KeyID: key.ID, MintedAt: now.Truncate(time.Millisecond)}
	arm.KeepKeyFrom = keepFrom
	return key, nil
}

// armDirect arms a direct job (arm as withCronKey left it, minted its
// fresh key) and returns the result and the key its row holds: the fresh
// one, or the one the row kept, opened. A kept key that does not open
// (sealed under an encryption key since replaced, or damaged) is replaced
// by a new one at once, so that the agent is never answered a key its
// fires are not signed with.
func (s *Service) armDirect(ctx context.Context, arm relay.ArmRequest, minted cronkey.Key) (relay.ArmResult, cronkey.Key, error) {
	res, err := s.engine.Arm(ctx, arm)
	if err != nil {
		return relay.ArmResult{}, cronkey.Key{}, err
	}
	held := res.OneShot.Direct
	if held.KeyID == minted.ID {
		return res, minted, nil
	}
	key, err := s.direct.sealer.Open(arm.AgentID, arm.JobID, held.Sealed)
	if err == nil && key.ID == held.KeyID {
		return res, key, nil
	}
	s.log.WarnContext(ctx, "the job's cron key does not open under relay.cron_key_encryption_key_file (the key file changed?); a new key replaces it",
		"agent_id", arm.AgentID, "job_id", arm.JobID, "cron_key_id", held.KeyID)
	now := s.now()
	// A floor after every key the row may hold: this arm stores its own.
	if minted, err = s.sealFresh(&arm, now, now.Add(time.Hour)); err != nil {
		return relay.ArmResult{}, cronkey.Key{}, err
	}
	again, err := s.engine.Arm(ctx, arm)
	if err != nil {
		return relay.ArmResult{}, cronkey.Key{}, err
	}
	if again.OneShot.Direct.KeyID != minted.ID {
		return relay.ArmResult{}, cronkey.Key{}, errors.New("provision: the store kept a cron key that does not open")
	}
	again.Changed = again.Changed || res.Changed
	again.Rekeyed = true
	if again.Replaced == "" {
		again.Replaced = res.Replaced
	}
	return again, minted, nil
}

// logRekeyed notes a job whose cron key changed (by its id only).
func (s *Service) logRekeyed(ctx context.Context, res relay.ArmResult) {
	if !res.Rekeyed || !s.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	o := res.OneShot
	if o.Direct.IsDirect() {
		s.log.InfoContext(ctx, "cron key minted", "agent_id", o.AgentID, "job_id", o.JobID, "schedule_id", o.ScheduleID,
			"cron_key_id", o.Direct.KeyID)
		return
	}
	s.log.InfoContext(ctx, "cron key retired: the job is armed NAS-mediated", "agent_id", o.AgentID, "job_id", o.JobID, "schedule_id", o.ScheduleID)
}

// RekeyAgent retires every cron key of agentID's direct jobs: it raises the
// agent's rekey floor in the store to now, so that the next provision of
// each job mints a new key (in every NAS process at once), and asks the
// agent's instances to reconcile (reason contract.ReconcileReasonRekey),
// which provisions them. A fire armed under an old key keeps it until its
// job is provisioned again, so no fire is lost. An agent NAS knows nothing
// of is 404 and nothing changes, as for DisableAgent.
func (s *Service) RekeyAgent(ctx context.Context, agentID string) (contract.AgentRekeyResponse, error) {
	if e := checkPathID("agent_id", agentID); e != nil {
		return contract.AgentRekeyResponse{}, e
	}
	fl, err := s.engine.AgentFlow(ctx, agentID)
	if err != nil {
		return contract.AgentRekeyResponse{}, fmt.Errorf("rekey: %w", err)
	}
	known, err := s.agentKnown(ctx, agentID, fl)
	if err != nil {
		return contract.AgentRekeyResponse{}, fmt.Errorf("rekey: %w", err)
	}
	if !known {
		return contract.AgentRekeyResponse{}, errUnknownAgent(agentID)
	}
	// Every key minted up to this millisecond is retired (MintedAt is kept
	// in whole milliseconds).
	floor, err := s.engine.RaiseRekeyFloor(ctx, agentID, s.now().Truncate(time.Millisecond).Add(time.Millisecond))
	if err != nil {
		return contract.AgentRekeyResponse{}, fmt.Errorf("rekey: %w", err)
	}
	s.log.InfoContext(ctx, "agent re-keyed: its cron keys are replaced as its direct jobs are provisioned", "agent_id", agentID,
		"rekeyed_at", contract.FormatTime(floor))
	s.nudgeAgent(ctx, agentID, contract.ReconcileReasonRekey)
	return contract.AgentRekeyResponse{AgentID: agentID, RekeyedAt: contract.NewTime(floor)}, nil
}
