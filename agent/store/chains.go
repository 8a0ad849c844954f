package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/chronoscron/chronos/agent/chain"
)

// KeepClosedChains is how many closed chains the store keeps (the newest
// by close time), so `chains show` can tell their story; older ones are
// dropped when a chain closes.
const KeepClosedChains = 200

// chainSet is the chains and class breakers of a State.
type chainSet struct {
	chains   []*chain.Chain
	breakers []*chain.Breaker
	// dirty is set when a callback may have changed them; enc is their
	// encoding as last read or written, so a write that did not touch
	// them reuses it instead of encoding every chain again.
	dirty bool
	enc   []byte
	// reshaped is set when chains were added or dropped: like jobs added
	// or removed, that rewrites jobs.json whole.
	reshaped bool
}

// load takes the decoded arrays, refusing nulls and repeated ids.
func (c *chainSet) load(chains []*chain.Chain, breakers []*chain.Breaker) error {
	seen := map[string]bool{}
	for i, ch := range chains {
		if ch == nil {
			return fmt.Errorf("chain %d is null", i)
		}
		if seen[ch.ID] {
			return fmt.Errorf("chain id %q appears twice", ch.ID)
		}
		seen[ch.ID] = true
	}
	classes := map[string]bool{}
	for i, b := range breakers {
		if b == nil {
			return fmt.Errorf("chain breaker %d is null", i)
		}
		if classes[b.Class] {
			return fmt.Errorf("chain breaker of class %q appears twice", b.Class)
		}
		classes[b.Class] = true
	}
	c.chains, c.breakers = chains, breakers
	enc, err := c.encode()
	c.enc = enc
	return err
}

// tail is what the closing line of the file carries after the jobs' "]"
// (empty without chains or breakers, else the two arrays) and whether it
// differs from what was last read or written.
func (c *chainSet) tail() ([]byte, bool, error) {
	if !c.dirty {
		return c.enc, false, nil
	}
	b, err := c.encode()
	if err != nil {
		return nil, false, err
	}
	changed := !bytes.Equal(b, c.enc)
	c.enc = b
	return b, changed, nil
}

// encode encodes the tail.
func (c *chainSet) encode() ([]byte, error) {
	if len(c.chains) == 0 && len(c.breakers) == 0 {
		return []byte{}, nil
	}
	var buf bytes.Buffer
	if len(c.chains) > 0 {
		b, err := json.Marshal(c.chains)
		if err != nil {
			return nil, fmt.Errorf("store: encode chains: %w", err)
		}
		buf.WriteString(`,"chains":`)
		buf.Write(b)
	}
	if len(c.breakers) > 0 {
		b, err := json.Marshal(c.breakers)
		if err != nil {
			return nil, fmt.Errorf("store: encode chain breakers: %w", err)
		}
		buf.WriteString(`,"chain_breakers":`)
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// Chain returns the chain with id for reading or changing, or nil.
func (s *State) Chain(id string) *chain.Chain {
	for _, c := range s.chains.chains {
		if c.ID == id {
			s.chains.dirty = true
			return c
		}
	}
	return nil
}

// Chains returns every chain, oldest first, for reading or changing.
func (s *State) Chains() []*chain.Chain {
	s.chains.dirty = true
	return s.chains.chains
}

// AddChain appends a chain; an existing id is an error.
func (s *State) AddChain(c *chain.Chain) error {
	for _, o := range s.chains.chains {
		if o.ID == c.ID {
			return fmt.Errorf("%w: chain %q", ErrExists, c.ID)
		}
	}
	s.chains.chains = append(s.chains.chains, c)
	s.chains.dirty = true
	s.chains.reshaped = true
	return nil
}

// Breaker returns the breaker of class, creating a closed one if it has
// none.
func (s *State) Breaker(class string) *chain.Breaker {
	s.chains.dirty = true
	for _, b := range s.chains.breakers {
		if b.Class == class {
			return b
		}
	}
	b := &chain.Breaker{Class: class, State: chain.BreakerClosed}
	s.chains.breakers = append(s.chains.breakers, b)
	sort.Slice(s.chains.breakers, func(i, j int) bool { return s.chains.breakers[i].Class < s.chains.breakers[j].Class })
	return b
}

// Breakers returns every class breaker, ordered by class, for reading or
// changing.
func (s *State) Breakers() []*chain.Breaker {
	s.chains.dirty = true
	return s.chains.breakers
}

// PruneChains drops the oldest closed chains beyond KeepClosedChains.
func (s *State) PruneChains() {
	var closed []*chain.Chain
	for _, c := range s.chains.chains {
		if !c.Open() && c.ClosedAt != nil {
			closed = append(closed, c)
		}
	}
	if len(closed) <= KeepClosedChains {
		return
	}
	sort.SliceStable(closed, func(i, j int) bool { return closed[i].ClosedAt.Before(*closed[j].ClosedAt) })
	drop := map[*chain.Chain]bool{}
	for _, c := range closed[:len(closed)-KeepClosedChains] {
		drop[c] = true
	}
	kept := s.chains.chains[:0:0]
	for _, c := range s.chains.chains {
		if !drop[c] {
			kept = append(kept, c)
		}
	}
	s.chains.chains = kept
	s.chains.dirty = true
	s.chains.reshaped = true
}

// LookupBreaker returns the breaker of class for reading or changing, or
// nil if the class has none.
func (s *State) LookupBreaker(class string) *chain.Breaker {
	for _, b := range s.chains.breakers {
		if b.Class == class {
			s.chains.dirty = true
			return b
		}
	}
	return nil
}
