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

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// directKeys is the Service's part for direct delivery: it mints and seals
// the jobs' cron keys.
type directKeys struct {
	*core
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

// newDirectKeys loads the encryption key of cron keys and refuses an agents
// file that allows an agent direct delivery without one.
func newDirectKeys(c *core) (*directKeys, error) {
	sealer, err := c.cfg.CronKeySealer()
	if err != nil {
		return nil, err
	}
	s := &directKeys{core: c, sealer: sealer}
	if sealer != nil || c.source == nil {
		return s, nil
	}
	policies, _ := c.source.AgentPolicies()
	var first string
	for a, p := range policies {
		if p.Direct && (first == "" || a < first) {
			first = a
		}
	}
	if first != "" {
		return nil, errNoCronKeyFile(first)
	}
	return s, nil
}

// directAllowed reports whether the agents file allows agentID direct
// delivery and NAS can seal its keys. An agents file reloaded with a new
// direct agent while NAS has no encryption key arms it NAS-mediated and
// says so once.
func (s *directKeys) directAllowed(ctx context.Context, agentID string) bool {
	if s.source == nil {
		return false
	}
	policies, _ := s.source.AgentPolicies()
	if !policies[agentID].Direct {
		return false
	}
	if s.sealer == nil {
		if _, seen := s.warned.LoadOrStore(agentID, true); !seen {
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
func (s *directKeys) withCronKey(ctx context.Context, arm *relay.ArmRequest) (cronkey.Key, error) {
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
func (s *directKeys) sealFresh(arm *relay.ArmRequest, now, keepFrom time.Time) (cronkey.Key, error) {
	key, err := cronkey.Mint()
	if err != nil {
		return cronkey.Key{}, fmt.Errorf("provision: %w", err)
	}
	sealed, err := s.sealer.Seal(arm.AgentID, arm.JobID, key)
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
func (s *directKeys) armDirect(ctx context.Context, arm relay.ArmRequest, minted cronkey.Key) (relay.ArmResult, cronkey.Key, error) {
	res, err := s.engine.Arm(ctx, arm)
	if err != nil {
		return relay.ArmResult{}, cronkey.Key{}, err
	}
	held := res.OneShot.Direct
	if held.KeyID == minted.ID {
		return res, minted, nil
	}
	key, err := s.sealer.Open(arm.AgentID, arm.JobID, held.Sealed)
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
func (s *directKeys) logRekeyed(ctx context.Context, res relay.ArmResult) {
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
