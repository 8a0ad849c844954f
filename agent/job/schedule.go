package job

import (
	"fmt"
	"time"

	"github.com/chronoscron/chronos/agent/schedule"
)

// ParseSchedule parses j's schedule as written, in its zone (or defLoc,
// UTC when nil, for a job that names none), anchored at its creation.
func ParseSchedule(j *Job, defLoc *time.Location) (*schedule.Schedule, error) {
	loc := defLoc
	if loc == nil {
		loc = time.UTC
	}
	if j.Timezone != "" {
		l, err := time.LoadLocation(j.Timezone)
		if err != nil {
			return nil, fmt.Errorf("job %s: zone: %w", j.ID, err)
		}
		loc = l
	}
	s, err := schedule.Parse(j.Schedule, schedule.Options{Location: loc, Anchor: j.CreatedAt})
	if err != nil {
		return nil, err
	}
	return s, nil
}
