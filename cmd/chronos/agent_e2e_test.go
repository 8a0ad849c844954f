package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/nasclient"
	"github.com/chronoscron/chronos/agent/sidecar"
	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
)

// e2e is a real `chronos nas` (embedded engine) and an agent home whose
// agent is started only by connections to its socket, as systemd would.
type e2e struct {
	bin    string
	dir    string
	home   string
	cfg    string
	env    []string
	nasURL string
	token  string
	ln     *net.TCPListener
	lnFile *os.File
}

// cli runs the binary to completion and returns its output.
func (e *e2e) cli(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), e.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chronos %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (e *e2e) status(t *testing.T) sidecar.Report {
	t.Helper()
	cmd := exec.Command(e.bin, "agent", "status", "--json", "--fires", "100")
	cmd.Env = append(os.Environ(), e.env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("agent status: %v\n%s", err, out)
	}
	var st sidecar.Report
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("agent status: %v\n%s", err, out)
	}
	return st
}

// armed lists NAS's armed fires of the agent, as the agent's token sees them.
func (e *e2e) armed(t *testing.T) map[string]time.Time {
	t.Helper()
	c, err := nasclient.New(nasclient.Config{PortalURL: e.nasURL, AccessToken: e.token})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for _, a := range l.Armed {
		out[a.JobID] = a.FireAt.UTC()
	}
	return out
}

func setupE2E(t *testing.T) *e2e {
	t.Helper()
	e := &e2e{bin: buildChronos(t), dir: t.TempDir(), token: "e2e-agent-token"}
	e.home = filepath.Join(e.dir, "home")
	nasAddr := freeAddr(t)
	e.nasURL = "http://" + nasAddr
	writeFile(t, filepath.Join(e.dir, "agents.yaml"), fmt.Sprintf("- agent_id: e2e-agent\n  instance_id: inst-e2e\n  token_sha256: %s\n", nas.TokenSHA256(e.token)))
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	nasCfg := filepath.Join(e.dir, "nas.yaml")
	writeFile(t, nasCfg, fmt.Sprintf(`listen: %s
public_url: %s
store: memory
agents_file: %s
allow_private_callbacks: true
log_level: debug
relay:
  secrets: [%q]
`, nasAddr, e.nasURL, filepath.Join(e.dir, "agents.yaml"), secret))
	startProc(t, e.bin, nil, nil, "nas", "--config", nasCfg)
	waitHTTP(t, e.nasURL+contract.PathReadyz, 30*time.Second)

	var f *os.File
	e.ln, f = listenerFile(t)
	e.lnFile = f
	e.cfg = filepath.Join(e.dir, "agent.yaml")
	writeFile(t, e.cfg, agentYAML(e.home, e.nasURL, "http://"+e.ln.Addr().String(), "agent:inst-e2e"))
	writeFile(t, filepath.Join(e.dir, "token"), e.token+"\n")
	e.env = []string{envAgentConfig + "=" + e.cfg, "CHRONOS_HOME=" + e.home}
	return e
}

// TestAgentScaleToZeroE2E: jobs added with the CLI while the agent is stopped
// are armed at NAS; each fire wakes the agent through its socket (the test
// plays systemd), runs exactly once and is re-armed; the agent exits when
// idle; and status shows desired == armed.
func TestAgentScaleToZeroE2E(t *testing.T) {
	t.Parallel()
	e := setupE2E(t)
	out := filepath.Join(e.dir, "fired.txt")

	// The agent is not running: the CLI arms its own changes.
	e.cli(t, "jobs", "add", "--id", "tick", "--schedule", "every 3s", "--", `echo "$CHRONOS_FIRE_AT" >> `+out)
	e.cli(t, "jobs", "add", "--id", "hourly", "--schedule", "every 1h", "--", "true")
	armed := e.armed(t)
	st := e.status(t)
	if len(armed) != 2 || st.InSync == nil || !*st.InSync || st.Running {
		t.Fatalf("after the CLI: armed %v, status %+v", armed, st)
	}
	for _, d := range st.Desired {
		if !armed[d.JobID].Equal(d.FireAt) {
			t.Fatalf("desired %s at %s, armed at %s", d.JobID, d.FireAt, armed[d.JobID])
		}
	}

	// Play systemd: start the agent when a connection is pending, let it
	// exit when idle, repeat.
	const wakes = 2
	for i := range wakes {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := waitConnection(ctx, e.lnFile)
		cancel()
		if err != nil {
			t.Fatalf("wake %d: no fire arrived: %v", i+1, err)
		}
		p := startProc(t, e.bin, append(append([]string{}, e.env...), activationEnv()...), []*os.File{e.lnFile},
			"agent", "serve", "--idle-exit", "1s", "--log-level", "debug")
		if err := p.wait(t, 30*time.Second); err != nil {
			t.Fatalf("wake %d: agent exit: %v\n%s", i+1, err, p.out.String())
		}
		if !strings.Contains(p.out.String(), `"socket_activated":true`) || !strings.Contains(p.out.String(), `"reason":"idle"`) {
			t.Fatalf("wake %d: not a socket-activated idle exit:\n%s", i+1, p.out.String())
		}
	}

	// Each slot ran exactly once, and nothing was missed in between.
	lg, err := ledger.Open(filepath.Join(e.home, "runs"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := lg.Runs(context.Background(), ledger.Filter{JobID: "tick"})
	if err != nil {
		t.Fatal(err)
	}
	var slots []time.Time
	for _, r := range runs {
		switch r.State {
		case ledger.StateSucceeded:
			if r.Trigger != "scheduled" {
				t.Fatalf("run %+v: a fire from NAS should run as scheduled, not by catch-up", r)
			}
			slots = append(slots, r.Slot)
		case ledger.StateDuplicate:
		default:
			t.Fatalf("run %+v", r)
		}
	}
	if len(slots) < wakes {
		t.Fatalf("%d successful runs over %d wakes: %+v", len(slots), wakes, runs)
	}
	for i := 1; i < len(slots); i++ {
		if d := slots[i].Sub(slots[i-1]); d != 3*time.Second {
			t.Fatalf("slots %v: a slot ran twice or was skipped", slots)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(data))
	uniq := slices.Compact(slices.Clone(lines))
	if len(lines) != len(slots) || len(uniq) != len(lines) {
		t.Fatalf("the job ran %d times for %d slots: %q", len(lines), len(slots), lines)
	}

	// Re-armed: NAS holds each job's next slot, and status agrees.
	st = e.status(t)
	armed = e.armed(t)
	if st.InSync == nil || !*st.InSync || st.Running || len(st.Desired) != 2 {
		t.Fatalf("final status %+v", st)
	}
	for _, d := range st.Desired {
		if !armed[d.JobID].Equal(d.FireAt) {
			t.Fatalf("desired %s at %s, armed at %s", d.JobID, d.FireAt, armed[d.JobID])
		}
	}
	if !armed["tick"].After(slots[len(slots)-1]) {
		t.Fatalf("tick armed at %s, not after its last slot %s", armed["tick"], slots[len(slots)-1])
	}
	if st.LastReconcile == nil || !st.LastReconcile.OK || st.Agent == nil || st.Agent.JWKS == nil || !st.Agent.JWKS.Loaded {
		t.Fatalf("final status %+v", st)
	}

	// A change made while the agent is stopped again: pausing disarms.
	e.cli(t, "jobs", "pause", "hourly")
	if armed := e.armed(t); len(armed) != 1 || armed["tick"].IsZero() {
		t.Fatalf("after pausing hourly: armed %v", armed)
	}
	// tick keeps firing every 3 s: a status read just as its slot passes,
	// before the fire has woken the agent to arm the next one, sees it
	// neither desired nor re-armed yet, so read again until the next fire
	// has settled it (a few of tick's periods, or, on a loaded machine, a
	// fire that found the agent slow to start and its retry).
	var text string
	for deadline := time.Now().Add(40 * time.Second); ; {
		st, text = e.status(t), e.cli(t, "agent", "status")
		inSync := st.InSync != nil && *st.InSync && len(st.Desired) == 1 && st.Desired[0].JobID == "tick"
		if inSync && strings.Contains(text, "desired 1, armed 1: in sync") && strings.Contains(text, "tick") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after pausing hourly: status %+v\n%s", st, text)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// TestJobsAddArmsThroughTheAgentThatServedTheHome: `agent serve --config F`
// records F in its home; later, with no CHRONOS_AGENT_CONFIG in sight,
// `jobs add --home H` finds that agent's config, takes its zone, arms the
// job at NAS through it and says so.
func TestJobsAddArmsThroughTheAgentThatServedTheHome(t *testing.T) {
	t.Parallel()
	e := setupE2E(t)
	writeFile(t, e.cfg, agentYAML(e.home, e.nasURL, "http://"+e.ln.Addr().String(), "agent:inst-e2e")+"timezone: Europe/Paris\n")
	p := startProc(t, e.bin, activationEnv(), []*os.File{e.lnFile},
		"agent", "serve", "--config", e.cfg, "--idle-exit", "1s")
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("agent serve: %v\n%s", err, p.out.String())
	}

	out, errOut, err := runFrom(t, e.bin, t.TempDir(), nil, "jobs", "add", "--home", e.home, "--id", "nightly", "--schedule", "0 3 * * *", "--", "true")
	if err != nil {
		t.Fatalf("jobs add: %v: %s", err, errOut)
	}
	if want := "armed at NAS through the agent of " + e.cfg; !strings.Contains(out, want) {
		t.Fatalf("jobs add said:\n%s\nwant it to say %q", out, want)
	}
	armed := e.armed(t)
	at, ok := armed["nightly"]
	if !ok {
		t.Fatalf("the job is not armed at NAS: %v", armed)
	}
	if h := at.In(mustZone(t, "Europe/Paris")).Hour(); h != 3 {
		t.Fatalf("armed at %s: 03:00 in the agent's zone (Europe/Paris) expected", at)
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
