package agent

import (
	"strings"
	"time"

	"github.com/chronoscron/chronos/agent/schedule"
)

// FireList is a schedule's next fire times with how it is understood: what
// chronos schedule next and explain print (as JSON with --json).
type FireList struct {
	Expr        string      `json:"expr"`
	Description string      `json:"description"`
	Fires       []time.Time `json:"fires"`
}

// NewFireList lists up to n fires of s, read from expr, after `after`.
func NewFireList(expr string, s *schedule.Schedule, after time.Time, n int) FireList {
	return FireList{Expr: expr, Description: s.Describe(), Fires: Fires(s, after, n)}
}

// Times returns the fire times, one RFC 3339 time per line with the zone's
// offset.
func (l FireList) Times() string {
	var b strings.Builder
	for _, t := range l.Fires {
		b.WriteString(t.Format(time.RFC3339Nano) + "\n")
	}
	return b.String()
}
