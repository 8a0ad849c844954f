package relaybench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/cronkey"
)

// cronKeys are the cron keys of a direct run: the encryption key NAS's
// dispatchers open the jobs' keys with (in a 0600 file, as chronos nas reads
// relay.cron_key_encryption_key_file), and each agent's job keys, which the
// sink's verifiers read as an agent reads its own key store.
type cronKeys struct {
	sealer *cronkey.Sealer
	file   string // the encryption key file
	dir    string // its temporary directory

	mu     sync.Mutex
	agents map[string]*agentKeys
}

// newCronKeys writes a fresh encryption key to a temporary file and loads
// it.
func newCronKeys() (*cronKeys, error) {
	dir, err := os.MkdirTemp("", "chronos-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench relay: cron key encryption key: %w", err)
	}
	text, err := cronkey.GenerateEncryptionKey()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench relay: %w", err)
	}
	file := filepath.Join(dir, "cron-key-encryption.key")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench relay: cron key encryption key: %w", err)
	}
	sealer, err := cronkey.LoadSealer(file)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench relay: %w", err)
	}
	return &cronKeys{sealer: sealer, file: file, dir: dir, agents: map[string]*agentKeys{}}, nil
}

// close removes the encryption key file.
func (k *cronKeys) close() { _ = os.RemoveAll(k.dir) }

// of returns (making once) agent's keys.
func (k *cronKeys) of(agent string) *agentKeys {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.agents[agent]
	if a == nil {
		a = &agentKeys{jobs: map[string]cronkey.Key{}}
		k.agents[agent] = a
	}
	return a
}

// mint mints job's key for agent, as NAS does at provision: the agent keeps
// it, and the row holds it sealed.
func (k *cronKeys) mint(agent, job string, now time.Time) (relay.DirectKey, error) {
	key, err := cronkey.Mint()
	if err != nil {
		return relay.DirectKey{}, fmt.Errorf("bench relay: %w", err)
	}
	sealed, err := k.sealer.Seal(agent, job, key)
	if err != nil {
		return relay.DirectKey{}, fmt.Errorf("bench relay: %w", err)
	}
	a := k.of(agent)
	a.mu.Lock()
	a.jobs[job] = key
	a.mu.Unlock()
	return relay.DirectKey{Sealed: sealed, KeyID: key.ID, MintedAt: now}, nil
}

// agentKeys are one agent's job keys (fireauth.CronKeys).
type agentKeys struct {
	mu   sync.RWMutex
	jobs map[string]cronkey.Key
}

// Direct implements fireauth.CronKeys.
func (a *agentKeys) Direct(jobID string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	_, ok := a.jobs[jobID]
	return ok
}

// CronKey implements fireauth.CronKeys: every key is current.
func (a *agentKeys) CronKey(_ context.Context, jobID, kid string) ([]byte, time.Time, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	k, ok := a.jobs[jobID]
	if !ok || k.ID != kid {
		return nil, time.Time{}, false
	}
	return k.Secret, time.Time{}, true
}
