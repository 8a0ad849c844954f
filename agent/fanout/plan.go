package fanout

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

// PlanVersion is the version of plan files this package writes.
const PlanVersion = 1

// Plan is the durable part of a fanout run: its resolved items, in order.
// Which items already ran is in the ledger (the children's lines), so the
// plan is written once, before the first child starts, and removed when the
// parent ends.
type Plan struct {
	Version   int       `json:"version"`
	RunID     string    `json:"run_id"`
	JobID     string    `json:"job_id"`
	CreatedAt time.Time `json:"created_at"`
	Items     []string  `json:"items"`
}

// Dir is where the plans of home's running fanouts are kept.
func Dir(home string) string { return filepath.Join(home, "fanout") }

// PlanPath is the plan file of parent run runID.
func PlanPath(home, runID string) string { return filepath.Join(Dir(home), runID+".json") }

// WritePlan makes p durable at its path under home.
func WritePlan(home string, p Plan) error {
	p.Version = PlanVersion
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("fanout: encode plan: %w", err)
	}
	if err := os.MkdirAll(Dir(home), 0o700); err != nil {
		return fmt.Errorf("fanout: plan directory: %w", err)
	}
	if err := atomicfile.Replace(PlanPath(home, p.RunID), b, 0o600); err != nil {
		return fmt.Errorf("fanout: write plan: %w", err)
	}
	return nil
}

// ReadPlan reads the plan of run runID; found is false when there is none.
func ReadPlan(home, runID string) (p Plan, found bool, err error) {
	b, err := os.ReadFile(PlanPath(home, runID))
	if errors.Is(err, fs.ErrNotExist) {
		return Plan{}, false, nil
	}
	if err != nil {
		return Plan{}, false, fmt.Errorf("fanout: read plan: %w", err)
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return Plan{}, false, fmt.Errorf("fanout: plan %s: %w", runID, err)
	}
	if p.Version > PlanVersion {
		return Plan{}, false, fmt.Errorf("fanout: plan %s has version %d, newer than %d", runID, p.Version, PlanVersion)
	}
	return p, true, nil
}

// RemovePlan removes the plan of run runID (none is not an error).
func RemovePlan(home, runID string) error {
	if err := os.Remove(PlanPath(home, runID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fanout: remove plan: %w", err)
	}
	return nil
}

// ChildRunID is the run id of the child of parent for item index i (from
// 0): stable, so a resumed parent finds its children in the ledger.
func ChildRunID(parent string, i int) string { return fmt.Sprintf("%s.c%05d", parent, i+1) }

// ReducerRunID is the run id of parent's reducer.
func ReducerRunID(parent string) string { return parent + ".reduce" }
