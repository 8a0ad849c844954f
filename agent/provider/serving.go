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
	// Config is the absolute path of the config the agent was started with
	// (empty: the agent is configured by the environment alone).
	Config string `json:"config,omitempty"`
	// PID is the agent process that wrote the record; StartedAt is when.
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	// UI is the base URL of the running agent's local API and dashboard
	// (http://127.0.0.1:8788); empty when it serves none or has stopped.
	UI string `json:"ui,omitempty"`
	// UITokenFile is the file holding that API's admin token.
	UITokenFile string `json:"ui_token_file,omitempty"`
}

// RecordServing writes ServingFile in home: the agent started with the
// config at configPath (made absolute) serves home. An empty configPath (an
// agent configured by the environment alone) removes the record, so no
// command trusts a config the agent no longer uses. The agent calls it when
// it starts, once home exists.
func RecordServing(home, configPath string, now time.Time) error {
	return WriteServing(home, Serving{Config: configPath, PID: os.Getpid(), StartedAt: now})
}

// WriteServing writes rec as home's ServingFile, its config path made
// absolute; a record naming neither a config nor a UI is removed instead.
func WriteServing(home string, rec Serving) error {
	file := filepath.Join(home, ServingFile)
	if rec.Config == "" && rec.UI == "" {
		if err := os.Remove(file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("provider: serving record: %w", err)
		}
		return nil
	}
	for _, p := range []*string{&rec.Config, &rec.UITokenFile} {
		if *p == "" {
			continue
		}
		abs, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("provider: serving record: %w", err)
		}
		*p = abs
	}
	rec.StartedAt = rec.StartedAt.UTC()
	data, err := json.MarshalIndent(rec, "", "  ")
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
	if err := json.Unmarshal(data, &s); err != nil || (s.Config == "" && s.UI == "") {
		return Serving{}, false, fmt.Errorf("provider: serving record %s: not a record of a serving agent", filepath.Join(home, ServingFile))
	}
	return s, true, nil
}
