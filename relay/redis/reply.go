package redis

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// rowFields is the number of fields of a packed one-shot row; a row whose
// fire_at the agent spelt in a non-canonical way has one more, the spelling,
// a row with a flexible window two more, the spelling ("" when canonical)
// and the window, and a row armed for direct delivery five more, the
// spelling, the window (0 when none), the sealed cron key, its id and when
// it was minted.
const rowFields = 10

// rowFieldsFlex is the number of fields of a row with a flexible window.
const rowFieldsFlex = rowFields + 2

// rowFieldsMax is the number of fields of the longest row, a direct one.
const rowFieldsMax = rowFields + 5

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

// rowValues are the fields of a one-shot row.
type rowValues struct {
	strs [7]string // schedule id, instance id, callback, last error, spelling, sealed key, key id
	ints [8]int64  // fire ms, fire ns, attempt, token, due - fire, fire - created, flex ms, key minted ms
}

// rowStrs and rowInts map the fields of a row to rowValues: field i is
// strs[rowStrs[i]] when that is not -1, else ints[rowInts[i]].
var (
	rowStrs = [rowFieldsMax]int{0, 1, -1, -1, 2, -1, -1, -1, -1, 3, 4, -1, 5, 6, -1}
	rowInts = [rowFieldsMax]int{-1, -1, 0, 1, -1, 2, 3, 4, 5, -1, -1, 6, -1, -1, 7}
)

// oneShot is the one-shot of (agent, job) the row holds.
func (v *rowValues) oneShot(agent, job string) relay.OneShot {
	o := relay.OneShot{
		AgentID: agent, JobID: job,
		ScheduleID: v.strs[0], InstanceID: v.strs[1], CallbackURL: v.strs[2], LastError: v.strs[3], FireAtSpelling: v.strs[4],
		FireAt:    ms(v.ints[0]).Add(time.Duration(v.ints[1])),
		Attempt:   int(v.ints[2]),
		State:     relay.StateArmed,
		DueAt:     ms(v.ints[0] + v.ints[4]),
		CreatedAt: ms(v.ints[0] - v.ints[5]),
		Flex:      time.Duration(v.ints[6]) * time.Millisecond,
	}
	if v.ints[3] != 0 {
		o.State = relay.StateLeased
	}
	if v.strs[5] != "" {
		o.Direct = relay.DirectKey{Sealed: v.strs[5], KeyID: v.strs[6], MintedAt: ms(v.ints[7])}
	}
	return o
}

// goodRowLen reports whether n is the field count of a row.
func goodRowLen(n int) bool {
	return n >= rowFields && n <= rowFieldsFlex || n == rowFieldsMax
}

// decodeRow turns the ten to fifteen fields of a packed row into a one-shot
// of (agent, job).
func decodeRow(agent, job string, f []any) (relay.OneShot, error) {
	if !goodRowLen(len(f)) {
		return relay.OneShot{}, fmt.Errorf("%w: row of %d fields", errReply, len(f))
	}
	var (
		v   rowValues
		err error
	)
	for i, x := range f {
		if k := rowStrs[i]; k >= 0 {
			v.strs[k], err = str(x)
		} else {
			v.ints[rowInts[i]], err = integer(x)
		}
		if err != nil {
			return relay.OneShot{}, err
		}
	}
	return v.oneShot(agent, job), nil
}

// decodePackedRow is decodeRow of a packed row as it comes, with its
// fencing token, reading the fields straight into the one-shot (its strings
// are parts of packed).
func decodePackedRow(agent, job, packed string) (relay.OneShot, int64, error) {
	n, b, err := unpackArrayHeader(packed)
	if err != nil {
		return relay.OneShot{}, 0, err
	}
	if !goodRowLen(n) {
		return relay.OneShot{}, 0, fmt.Errorf("%w: row of %d fields", errReply, n)
	}
	var v rowValues
	for i := range n {
		var x scalar[string]
		if x, b, err = unpackScalar(b); err != nil {
			return relay.OneShot{}, 0, err
		}
		switch k := rowStrs[i]; {
		case k >= 0 && !x.isStr:
			return relay.OneShot{}, 0, fmt.Errorf("%w: integer, want string", errReply)
		case k >= 0:
			v.strs[k] = x.s
		case x.isStr:
			if v.ints[rowInts[i]], err = integer(x.s); err != nil {
				return relay.OneShot{}, 0, err
			}
		default:
			v.ints[rowInts[i]] = x.n
		}
	}
	return v.oneShot(agent, job), v.ints[3], nil
}

// token returns the fencing token field of a packed row.
func rowToken(f []any) (int64, error) {
	if len(f) < rowFields {
		return 0, fmt.Errorf("%w: row of %d fields", errReply, len(f))
	}
	return integer(f[6])
}

// decodeDead turns a packed dead letter {agent, job, row fields 1 to 10,
// reason, failed ms, [spelling], [flexible window ms], [sealed cron key,
// key id, key minted ms]}.
func decodeDead(v any) (relay.DeadLetter, error) {
	f, err := array(v)
	if err != nil {
		return relay.DeadLetter{}, err
	}
	if len(f) < rowFields+4 || len(f) > rowFields+6 && len(f) != rowFields+9 {
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
	if len(f) > rowFields+5 {
		flex, err := integer(f[rowFields+5])
		if err != nil {
			return d, err
		}
		d.Flex = time.Duration(flex) * time.Millisecond
	}
	if len(f) > rowFields+6 {
		var k relay.DirectKey
		if k.Sealed, err = str(f[rowFields+6]); err != nil {
			return d, err
		}
		if k.KeyID, err = str(f[rowFields+7]); err != nil {
			return d, err
		}
		minted, err := integer(f[rowFields+8])
		if err != nil {
			return d, err
		}
		k.MintedAt = ms(minted)
		if k.Sealed != "" {
			d.Direct = k
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
