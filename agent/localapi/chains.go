package localapi

import (
	"context"
	"errors"
	"net/http"
	"regexp"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/agent"
	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/contract"
)

// chainClass is what a chain class (and a breaker's path segment) may be.
var chainClass = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ChainList answers GET /api/chains: the chains selected, open ones first,
// then the others, newest first within each.
type ChainList struct {
	Chains []chain.Chain `json:"chains"`
}

// ChainStepRun is one step of a chain with its run, when it has one.
type ChainStepRun struct {
	chain.Step
	// Run is the step's run as the ledger has it (absent until the step
	// has a run, or when the run has aged out of the ledger).
	Run *RunInfo `json:"run,omitempty"`
}

// ChainStory answers GET /api/chains/{id}: the chain whole, its
// transitions, and its steps in spawn order each with its run.
type ChainStory struct {
	chain.Chain
	Steps []ChainStepRun `json:"steps"`
}

// BreakerList answers GET /api/chain-breakers: every class's breaker,
// ordered by class (without the alerts still owed to the notification
// outbox).
type BreakerList struct {
	Breakers []chain.Breaker `json:"breakers"`
}

func (s *Server) listChains(c echo.Context) error {
	f := agent.ChainFilter{Class: c.QueryParam("class")}
	if f.Class != "" && !chainClass.MatchString(f.Class) {
		return contract.BadRequest(contract.CodeInvalidRequest, "class %q must match ^[A-Za-z0-9._-]{1,128}$", f.Class)
	}
	if st := c.QueryParam("state"); st != "" {
		parsed, err := chain.ParseState(st)
		if err != nil {
			return contract.BadRequest(contract.CodeInvalidRequest, "state: %v", err)
		}
		f.State = parsed
	}
	chains, err := s.rt.Chains(c.Request().Context(), f)
	if err != nil {
		return err
	}
	// Open chains first, then closed ones; newest first within each.
	out := ChainList{Chains: make([]chain.Chain, 0, len(chains))}
	for _, open := range []bool{true, false} {
		for i := len(chains) - 1; i >= 0; i-- {
			if chains[i].Open() == open {
				out.Chains = append(out.Chains, chains[i])
			}
		}
	}
	return writeJSON(c, http.StatusOK, out)
}

func (s *Server) showChain(c echo.Context) error {
	id := c.Param("id")
	if !contract.ValidJobID(id) {
		return contract.BadRequest(contract.CodeInvalidRequest, "chain id %q must match ^[A-Za-z0-9._-]{1,128}$", id)
	}
	ctx := c.Request().Context()
	ch, err := s.rt.Chain(ctx, id)
	if errors.Is(err, chain.ErrNotFound) {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "no chain %q", id)
	}
	if err != nil {
		return err
	}
	runs, err := s.stepRuns(ctx, &ch)
	if err != nil {
		return err
	}
	story := ChainStory{Chain: ch, Steps: make([]ChainStepRun, 0, len(ch.Steps))}
	for _, st := range ch.Steps {
		sr := ChainStepRun{Step: st}
		if r, ok := runs[st.RunID]; ok && st.RunID != "" {
			info := s.runInfo(r)
			sr.Run = &info
		}
		story.Steps = append(story.Steps, sr)
	}
	return writeJSON(c, http.StatusOK, story)
}

// stepRuns reads the runs of ch's steps from the ledger, by run id.
func (s *Server) stepRuns(ctx context.Context, ch *chain.Chain) (map[string]ledger.Run, error) {
	want := map[string]bool{}
	for _, id := range ch.RunIDs() {
		want[id] = true
	}
	out := map[string]ledger.Run{}
	if len(want) == 0 {
		return out, nil
	}
	runs, err := s.rt.Runs(ctx, ledger.Filter{Since: ch.CreatedAt})
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		if want[r.RunID] {
			out[r.RunID] = r
		}
	}
	return out, nil
}

func (s *Server) listBreakers(c echo.Context) error {
	bs, err := s.rt.Breakers(c.Request().Context())
	if err != nil {
		return err
	}
	for i := range bs {
		bs[i] = withoutOutbound(bs[i])
	}
	return writeJSON(c, http.StatusOK, BreakerList{Breakers: bs})
}

func (s *Server) resetBreaker(c echo.Context) error {
	class := c.Param("class")
	if !chainClass.MatchString(class) {
		return contract.BadRequest(contract.CodeInvalidRequest, "class %q must match ^[A-Za-z0-9._-]{1,128}$", class)
	}
	b, err := s.rt.ResetBreaker(c.Request().Context(), class)
	if errors.Is(err, chain.ErrNotFound) {
		return contract.Errorf(http.StatusNotFound, contract.CodeNotFound, "chain class %q has no breaker", class)
	}
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, withoutOutbound(b))
}

// withoutOutbound is b without the alerts it still owes the notification
// outbox: they carry their targets (webhook addresses, commands), which the
// breaker's answer has no need to repeat.
func withoutOutbound(b chain.Breaker) chain.Breaker {
	b.Outbound = nil
	return b
}
