package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/chronoscron/chronos/internal/atomicfile"
)

// ServingFile, in an agent's home, records the config file of the agent that
// serves the home. A command that changes the home (chronos jobs add, edit,
// pause, resume, rm) reads it to find that agent's zone and NAS without being
// told, so a change is armed at once even when the agent is not running.
const ServingFile = "serving.json"

// Serving is the content of ServingFile.
type Serving struct {
	// Config is the absolute path of the config the agent was started with.
	Config string `json:"config"`
	// PID is the agent process that wrote the record; StartedAt is when.
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
}

// RecordServing writes ServingFile in home: the agent started with the
// config at configPath (made absolute) serves home. An empty configPath (an
// agent configured by the environment alone) removes the record, so no
// command trusts a config the agent no longer uses. The agent calls it when
// it starts, once home exists.
func RecordServing(home, configPath string, now time.Time) error {
	file := filepath.Join(home, ServingFile)
	if configPath == "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("provider: serving record: %w", err)
		}
		return nil
	}
	abs, err := filepath.Abs(configPath)
	if err != nil {
		return fmt.Errorf("provider: serving record: %w", err)
	}
	data, err := json.MarshalIndent(Serving{Config: abs, PID: os.Getpid(), StartedAt: now.UTC()}, "", "  ")
	if err != nil {
		return fmt.Errorf("provider: serving record: %w", err)
	}
	if err := atomicfile.Replace(filepath.Join(home, ServingFile), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("provider: serving record: %w", err)
	}
	return nil
}

// ReadServing returns the record of home; ok is false when there is none.
func ReadServing(home string) (s Serving, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(home, ServingFile))
	if errors.Is(err, fs.ErrNotExist) {
		return Serving{}, false, nil
	}
	if err != nil {
		return Serving{}, false, fmt.Errorf("provider: serving record: %w", err)
	}
	if err := json.Unmarshal(data, &s); err != nil || s.Config == "" {
		return Serving{}, false, fmt.Errorf("provider: serving record %s: not a record of a config file", filepath.Join(home, ServingFile))
	}
	return s, true, nil
}
