package agentcall

import (
	"strconv"
	"time"

	"github.com/chronoscron/chronos/contract"
)

// FireBody returns the body of a fire POSTed to an agent: json.Marshal of f,
// byte for byte (the bytes a fire token's `bh` binds), built without
// reflection. A NAS-mediated fire and a direct one carry the same body.
func FireBody(f *contract.FireRequest) []byte {
	return AppendFireBody(make([]byte, 0, fireBodySize(f)), f)
}

// fireBodySize is room enough for a FireRequest's JSON in the common case:
// the fixed keys and punctuation, the ids, the longest fire_at (nanoseconds
// and an offset) and attempt.
func fireBodySize(f *contract.FireRequest) int {
	return 112 + len(f.JobID) + len(f.ScheduleID)
}

// AppendFireBody appends f as json.Marshal writes it, byte for byte, without
// reflection or the Marshaler round trip of fire_at.
func AppendFireBody(b []byte, f *contract.FireRequest) []byte {
	b = append(b, `{"job_id":`...)
	b = contract.AppendJSONString(b, f.JobID)
	if f.FireAt.IsZero() {
		b = append(b, `,"fire_at":null`...)
	} else {
		b = append(b, `,"fire_at":"`...)
		b = appendTimeText(b, f.FireAt)
		b = append(b, '"')
	}
	b = append(b, `,"schedule_id":`...)
	b = contract.AppendJSONString(b, f.ScheduleID)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(f.Attempt), 10)
	return append(b, '}')
}

// appendTimeText appends t as contract.Time writes it on the wire (Text),
// unquoted: its spelling, or the canonical RFC 3339 form in UTC. Neither
// holds a character JSON escapes.
func appendTimeText(b []byte, t contract.Time) []byte {
	if s := t.Spelling(); s != "" {
		return append(b, s...)
	}
	return t.UTC().AppendFormat(b, time.RFC3339Nano)
}
