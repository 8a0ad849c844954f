package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// Options are the demo's settings.
type Options struct {
	// Home is the agent's home directory, created if missing and kept after
	// the demo. Empty: a temporary directory, removed when Run returns.
	Home string
}

// Identity of the demo's one agent.
const (
	demoAgentID    = "demo-agent"
	demoInstanceID = "demo-instance"
)

// identity is how the demo's agent is known to NAS: its ids and the access
// token whose hash NAS holds.
type identity struct {
	agentID, instanceID, token string
}

// Run runs the demo until ctx ends, narrating every step to out, then prints
// a summary from the agent's run ledger. It returns nil on a normal end
// (ctx cancelled or past its deadline).
func Run(ctx context.Context, o Options, out io.Writer) error {
	start := time.Now()
	n := newNarrator(out, start)
	h, err := openHome(o.Home)
	if err != nil {
		return err
	}
	defer h.remove()
	lns, err := listenLoopback()
	if err != nil {
		return err
	}
	// The servers close their listeners when they stop; this covers the
	// returns before they start.
	defer lns.close()

	id := identity{agentID: demoAgentID, instanceID: demoInstanceID, token: randomHex(24)}
	ns, err := startNAS(ctx, nasConfig{public: lns.public, relay: lns.relay, agent: id, narrator: n})
	if err != nil {
		return err
	}
	defer ns.close()
	ag, err := startAgent(ctx, agentConfig{home: h.dir, listener: lns.agent, nasURL: ns.publicURL, agent: id, narrator: n})
	if err != nil {
		return err
	}
	defer ag.close()

	n.header("Chronos demo: NAS, its relay and an agent in one process (embedded engine, no Redis).")
	n.header("  NAS    %s  (agent API, JWKS)   relay route %s", ns.publicURL, ns.relayURL)
	n.header("  agent  %s  home %s (%s)", ag.url, h.dir, h.kind.where())

	err = addSampleJobs(ctx, ag, n)
	if err == nil {
		n.header("Ctrl-C stops the demo and prints a summary.")
		n.header("")
		n.header("%10s  %-10s %-15s %s", "TIME", "JOB", "STEP", "DETAIL")
	}
	n.release()
	select {
	case <-ctx.Done():
	case <-ns.done:
	case <-ag.done:
	}
	early := ctx.Err() == nil
	// NAS stops first: its servers and dispatcher are waited for before the
	// agent stops, so no fire is in flight against a stopped agent, and the
	// summary comes last.
	err = errors.Join(err, ns.stop(), ag.stop())
	if err == nil && early {
		err = errors.New("demo: NAS or the agent stopped before the end of the demo")
	}
	if err != nil {
		return err
	}
	return summarize(out, ag, h, time.Since(start))
}

// homeKind says whether the agent's home outlives the demo.
type homeKind int

const (
	homeTemporary homeKind = iota // made for the demo and removed after it
	homeKept                      // given by the user, kept
)

// where describes the kind of home for the banner.
func (k homeKind) where() string {
	if k == homeKept {
		return "kept"
	}
	return "temporary, removed at exit; --home DIR keeps one"
}

// home is the agent's home directory.
type home struct {
	dir  string
	kind homeKind
}

// openHome makes dir (kept), or a temporary home when dir is empty.
func openHome(dir string) (home, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return home{}, fmt.Errorf("demo: home: %w", err)
		}
		return home{dir: dir, kind: homeKept}, nil
	}
	tmp, err := os.MkdirTemp("", "chronos-demo-")
	if err != nil {
		return home{}, fmt.Errorf("demo: %w", err)
	}
	return home{dir: tmp, kind: homeTemporary}, nil
}

// remove removes a temporary home and leaves a kept one.
func (h home) remove() {
	if h.kind == homeTemporary {
		_ = os.RemoveAll(h.dir)
	}
}

// listeners are the demo's three loopback listeners.
type listeners struct {
	public, relay, agent net.Listener
}

// listenLoopback opens the three listeners on 127.0.0.1 ephemeral ports.
func listenLoopback() (listeners, error) {
	var lns listeners
	for _, p := range []*net.Listener{&lns.public, &lns.relay, &lns.agent} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			lns.close()
			return listeners{}, fmt.Errorf("demo: listen: %w", err)
		}
		*p = ln
	}
	return lns, nil
}

// close closes the listeners that are open; closing one a server has
// already closed does nothing.
func (l listeners) close() {
	for _, ln := range []net.Listener{l.public, l.relay, l.agent} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
