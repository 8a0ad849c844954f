package redis

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/chronoscron/chronos/relay"
)

// decodePeek reads scriptPeekDue's {{member...}, {agent...}, more} or
// scriptPeekReap's {{member...}, {agent...}}; a shard with neither has
// empty (not nil) candidates.
func decodePeek(v any) (cands, agents []any, more bool, err error) {
	a, err := array(v)
	if err != nil || (len(a) != 2 && len(a) != 3) {
		return nil, nil, false, fmt.Errorf("%w: peek of a claim", errReply)
	}
	if cands, err = array(a[0]); err != nil {
		return nil, nil, false, err
	}
	if agents, err = array(a[1]); err != nil {
		return nil, nil, false, err
	}
	if len(a) == 3 {
		n, err := integer(a[2])
		if err != nil {
			return nil, nil, false, err
		}
		more = n == 1
	}
	if cands == nil {
		cands = []any{}
	}
	return cands, agents, more, nil
}

// rateArg is a rate as the scripts take it ("0" for none).
func rateArg(rate float64) string {
	if rate <= 0 {
		return "0"
	}
	return strconv.FormatFloat(rate, 'g', -1, 64)
}

// decodeClaimed reads a claim's {until ms, held, pulled, {agent index,
// job, stopped, packed row, failures}...} of the agents. Every lease in the
// reply is taken now: it hands over each one that decodes, even when
// another does not (that one lapses and the reaper returns it), with the
// error.
func decodeClaimed(v any, agents []string, claimed time.Time) ([]relay.Lease, claimResult, error) {
	var r claimResult
	f, err := array(v)
	if err != nil {
		return nil, r, err
	}
	if len(f) < 3 || (len(f)-3)%5 != 0 {
		return nil, r, fmt.Errorf("%w: claim reply of %d fields", errReply, len(f))
	}
	untilMs, err1 := integer(f[0])
	held, err2 := integer(f[1])
	pulled, err3 := integer(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, r, err
	}
	r.held, r.pulled = int(held), int(pulled)
	until := ms(untilMs)
	out := make([]relay.Lease, 0, (len(f)-3)/5)
	var bad error
	for i := 3; i < len(f); i += 5 {
		l, err := decodeClaimedLease(f[i:i+5], agents)
		if err != nil {
			bad = err
			continue
		}
		l.Until, l.ClaimedAt = until, claimed
		out = append(out, l)
	}
	return out, r, bad
}

// decodeClaimedLease reads one lease of a claim reply: the index of its
// agent in agents (from 1), its job, whether its instance is stopped, its
// packed row and its agent's failures.
func decodeClaimedLease(f []any, agents []string) (relay.Lease, error) {
	idx, err := integer(f[0])
	if err != nil {
		return relay.Lease{}, err
	}
	if idx < 1 || idx > int64(len(agents)) {
		return relay.Lease{}, fmt.Errorf("%w: claimed agent %d of %d", errReply, idx, len(agents))
	}
	job, err1 := str(f[1])
	stopped, err2 := integer(f[2])
	packed, err3 := str(f[3])
	fails, err4 := integer(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return relay.Lease{}, err
	}
	o, tok, err := decodePackedRow(agents[idx-1], job, packed)
	if err != nil {
		return relay.Lease{}, err
	}
	return relay.Lease{OneShot: o, Token: tok, InstanceStopped: stopped == 1, AgentFailures: int(fails)}, nil
}

// decodeLeaseFields reads a lease from its agent, job, until ms and row.
func decodeLeaseFields(agentV, jobV, untilV any, row []any) (relay.Lease, error) {
	if !goodRowLen(len(row)) {
		return relay.Lease{}, fmt.Errorf("%w: lease row of %d fields", errReply, len(row))
	}
	agent, err := str(agentV)
	if err != nil {
		return relay.Lease{}, err
	}
	job, err := str(jobV)
	if err != nil {
		return relay.Lease{}, err
	}
	until, err := integer(untilV)
	if err != nil {
		return relay.Lease{}, err
	}
	o, err := decodeRow(agent, job, row)
	if err != nil {
		return relay.Lease{}, err
	}
	tok, err := rowToken(row)
	if err != nil {
		return relay.Lease{}, err
	}
	return relay.Lease{OneShot: o, Token: tok, Until: ms(until)}, nil
}

// shardHead is what a claim read of a shard's due head: the candidates
// (nil: not read), how many it asked for, the agents whose held fires may
// go out (ready, or whose gate passed) and whether there were more of
// those than it asked for.
type shardHead struct {
	cands  []any
	asked  int
	agents []any
	more   bool
}

// claimResult is what one claim script did besides its leases.
type claimResult struct {
	peeked int // candidates it was given
	held   int // candidates it held back
	// pulled counts the fires it made due now: fires whose flexible window
	// opened.
	pulled int
	// more says that more agents' held fires may go out than the peek
	// returned.
	more bool
}
