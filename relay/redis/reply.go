package redis

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// rowFields is the number of fields of a packed one-shot row; a row whose
// fire_at the agent spelt in a non-canonical way has one more, the spelling.
const rowFields = 10

// errReply is a reply of a shape the scripts never produce.
var errReply = errors.New("redis: unexpected script reply")

// array reads v as a script's array reply.
func array(v any) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %T, want array", errReply, v)
	}
	return a, nil
}

// str reads v as a string reply.
func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %T, want string", errReply, v)
	}
	return s, nil
}

// integer reads v as an integer reply (Lua numbers arrive as integers).
func integer(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %q, want integer", errReply, n)
		}
		return i, nil
	default:
		return 0, fmt.Errorf("%w: %T, want integer", errReply, v)
	}
}

// ms converts milliseconds since the epoch to a UTC time.
func ms(v int64) time.Time { return time.UnixMilli(v).UTC() }

// decodeRow turns the ten or eleven fields of a packed row into a one-shot
// of (agent, job).
func decodeRow(agent, job string, f []any) (relay.OneShot, error) {
	if len(f) != rowFields && len(f) != rowFields+1 {
		return relay.OneShot{}, fmt.Errorf("%w: row of %d fields", errReply, len(f))
	}
	var (
		o    relay.OneShot
		err  error
		ints [6]int64 // fire ms, fire ns, attempt, token, due - fire, fire - created
	)
	o.AgentID, o.JobID = agent, job
	if o.ScheduleID, err = str(f[0]); err != nil {
		return o, err
	}
	if o.InstanceID, err = str(f[1]); err != nil {
		return o, err
	}
	if o.CallbackURL, err = str(f[4]); err != nil {
		return o, err
	}
	if o.LastError, err = str(f[9]); err != nil {
		return o, err
	}
	if len(f) > rowFields {
		if o.FireAtSpelling, err = str(f[rowFields]); err != nil {
			return o, err
		}
	}
	for i, idx := range []int{2, 3, 5, 6, 7, 8} {
		if ints[i], err = integer(f[idx]); err != nil {
			return o, err
		}
	}
	o.FireAt = ms(ints[0]).Add(time.Duration(ints[1]))
	o.Attempt = int(ints[2])
	o.State = relay.StateArmed
	if ints[3] != 0 {
		o.State = relay.StateLeased
	}
	o.DueAt = ms(ints[0] + ints[4])
	o.CreatedAt = ms(ints[0] - ints[5])
	return o, nil
}

// token returns the fencing token field of a packed row.
func rowToken(f []any) (int64, error) {
	if len(f) < rowFields {
		return 0, fmt.Errorf("%w: row of %d fields", errReply, len(f))
	}
	return integer(f[6])
}

// decodeDead turns a packed dead letter {agent, job, row fields 1 to 10,
// reason, failed ms, [spelling]}.
func decodeDead(v any) (relay.DeadLetter, error) {
	f, err := array(v)
	if err != nil {
		return relay.DeadLetter{}, err
	}
	if len(f) != rowFields+4 && len(f) != rowFields+5 {
		return relay.DeadLetter{}, fmt.Errorf("%w: dead letter of %d fields", errReply, len(f))
	}
	agent, err := str(f[0])
	if err != nil {
		return relay.DeadLetter{}, err
	}
	job, err := str(f[1])
	if err != nil {
		return relay.DeadLetter{}, err
	}
	o, err := decodeRow(agent, job, f[2:2+rowFields])
	if err != nil {
		return relay.DeadLetter{}, err
	}
	o.State = relay.StateDead
	d := relay.DeadLetter{OneShot: o}
	if d.Reason, err = str(f[2+rowFields]); err != nil {
		return d, err
	}
	failed, err := integer(f[3+rowFields])
	if err != nil {
		return d, err
	}
	d.FailedAt = ms(failed)
	if len(f) > rowFields+4 {
		if d.FireAtSpelling, err = str(f[rowFields+4]); err != nil {
			return d, err
		}
	}
	return d, nil
}

// splitMember is the inverse of member.
func splitMember(m string) (agent, job string, ok bool) {
	for i := 0; i < len(m); i++ {
		if m[i] != ':' {
			continue
		}
		n, err := strconv.Atoi(m[:i])
		if err != nil || n < 0 || i+1+n > len(m) {
			return "", "", false
		}
		return m[i+1 : i+1+n], m[i+1+n:], true
	}
	return "", "", false
}
