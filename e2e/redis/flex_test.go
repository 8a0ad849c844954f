package redise2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/redistest"
)

// agentCall makes one call of the agent API as a, with body (nil: none);
// it returns the status and the answer's body.
func agentCall(ctx context.Context, client *http.Client, method, url string, a agentCred, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set(contract.HeaderContentType, contract.MediaTypeJSON)
	}
	req.Header.Set(contract.HeaderAuthorization, contract.BearerPrefix+a.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, nil
}

// provisionFlex arms f with a flexible window of flex seconds (0: none).
func provisionFlex(ctx context.Context, client *http.Client, nasURL string, a agentCred, callback string, f fire, flex int) error {
	at := f.fireAt.UTC().Format(time.RFC3339Nano)
	body := map[string]any{"job_id": f.job, "fire_at": at, "agent_callback_url": callback, "dedup_key": f.job + ":" + at}
	if flex > 0 {
		body["flex_seconds"] = flex
	}
	status, b, err := agentCall(ctx, client, http.MethodPost, nasURL+contract.PathProvision, a, body)
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("provision %s/%s: %d %s", a.id, f.job, status, b)
	}
	return nil
}

// flexFire is one fire of the flexible-window test.
type flexFire struct {
	fire
	flex int
}

// provisionAll arms every fire with workers parallel callers.
func provisionAll(t *testing.T, nasURL string, agents map[string]agentCred, s *sink, fires []flexFire, workers int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 10 * time.Second}
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(fires); i = int(next.Add(1) - 1) {
				f := fires[i]
				if err := provisionFlex(ctx, client, nasURL, agents[f.agent], s.callback(f.agent), f.fire, f.flex); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
}

// TestFlexibleWindowsSpreadTheHerd: 10,000 jobs of 1,000 agents due at one
// instant with a flexible window are delivered spread over the window (the
// busiest second carries under three times the mean), each inside its
// window, the fires of one agent in one burst, and each job at the same
// offset on its next slot; jobs without a window go out at fire_at as
// before. The window is 30s (5 minutes with CHRONOS_SOAK=1).
func TestFlexibleWindowsSpreadTheHerd(t *testing.T) {
	t.Parallel()
	window := 30
	if soak() {
		window = 300
	}
	const flexAgents, jobsEach, plainAgents, plainJobs = 1000, 10, 20, 5
	store := redistest.URL(t) + "/0?prefix=" + redistest.Prefix(t)
	c := newCluster(t, store, flexAgents+plainAgents)
	_, url := c.startDefaultNAS("nas")
	s := startSink(t, fetchJWKS(t, url))
	at := time.Now().Add(25 * time.Second).Truncate(time.Second)
	var fires []flexFire
	for i, a := range c.agents {
		if i < flexAgents {
			for j := range jobsEach {
				fires = append(fires, flexFire{fire{agent: a.id, job: fmt.Sprintf("job-%02d", j), fireAt: at}, window})
			}
			continue
		}
		for j := range plainJobs {
			fires = append(fires, flexFire{fire: fire{agent: a.id, job: fmt.Sprintf("job-%02d", j), fireAt: at}})
		}
	}
	agents := byID(c.agents)
	provisionAll(t, url, agents, s, fires, 16)
	if time.Now().After(at) {
		t.Fatalf("arming %d fires ended after their fire_at: the test machine is too slow for this test", len(fires))
	}
	// The offset each flexible fire was armed with, from the store.
	e := openStore(t, store)
	offsets := map[string]time.Duration{}
	for _, f := range fires {
		if f.flex == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		row, err := e.Get(ctx, f.agent, f.job)
		cancel()
		if err != nil {
			t.Fatalf("get %s/%s: %v", f.agent, f.job, err)
		}
		offsets[f.agent+"/"+f.job] = row.DueAt.Sub(row.FireAt)
	}
	s.mustArrive(t, len(fires), time.Duration(window)*time.Second+2*time.Minute)
	checkDelivered(t, s, plainFires(fires), allAcked(len(fires)))

	s.mu.Lock()
	perSecond := make([]int, window+1)
	bursts := map[string][2]time.Time{}
	for _, f := range fires {
		key := slot(f.agent, f.job, f.fireAt)
		arrived, lag := s.firstAt[key], s.lags[key]
		if f.flex == 0 {
			if lag > time.Second {
				t.Errorf("%s without a window arrived %s after fire_at", key, lag)
			}
			continue
		}
		if lag < 0 || lag > time.Duration(f.flex)*time.Second {
			t.Errorf("%s arrived %s after fire_at, outside its %ds window", key, lag, f.flex)
		}
		perSecond[min(int(lag/time.Second), window)]++
		b := bursts[f.agent]
		if b[0].IsZero() || arrived.Before(b[0]) {
			b[0] = arrived
		}
		if arrived.After(b[1]) {
			b[1] = arrived
		}
		bursts[f.agent] = b
	}
	s.mu.Unlock()
	mean := float64(flexAgents*jobsEach) / float64(window)
	busiest := 0
	for _, n := range perSecond {
		busiest = max(busiest, n)
	}
	t.Logf("flexible fires per second of the window: %v (mean %.0f)", perSecond, mean)
	if float64(busiest) >= 3*mean {
		t.Errorf("the busiest second carried %d fires, 3× the mean is %.0f: not spread", busiest, 3*mean)
	}
	for agent, b := range bursts {
		if spread := b[1].Sub(b[0]); spread > time.Second {
			t.Errorf("agent %s's fires arrived over %s, not in one burst", agent, spread)
		}
	}
	// The next slot of a sample of jobs is armed at the same offset.
	next := at.Add(time.Hour)
	var sample []flexFire
	for i := 0; i < flexAgents*jobsEach; i += 97 {
		f := fires[i]
		f.fireAt = next
		sample = append(sample, f)
	}
	provisionAll(t, url, agents, s, sample, 8)
	for _, f := range sample {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		row, err := e.Get(ctx, f.agent, f.job)
		cancel()
		if err != nil {
			t.Fatalf("get %s/%s: %v", f.agent, f.job, err)
		}
		if got, want := row.DueAt.Sub(row.FireAt), offsets[f.agent+"/"+f.job]; got != want {
			t.Errorf("%s/%s: next slot at offset %s, the first at %s", f.agent, f.job, got, want)
		}
	}
}

// plainFires returns the fires of flexible ones.
func plainFires(fs []flexFire) []fire {
	out := make([]fire, len(fs))
	for i, f := range fs {
		out[i] = f.fire
	}
	return out
}

// TestKillSwitch: an operator disables an agent with `chronos agent
// disable`: its provision, list and cancel calls answer 403 invalid_client
// and none of its armed fires is delivered while another agent's are; on
// `chronos agent enable` those within relay.misfire_grace are delivered and
// those past it are reported to the agent as failed fires. An unknown agent
// is refused. On both engines.
func TestKillSwitch(t *testing.T) {
	t.Parallel()
	for _, eng := range engines(t) {
		t.Run(eng.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, eng.store, 2)
			off, on := c.agents[0], c.agents[1]
			token := strings.Repeat("k", 32)
			writeFile(t, c.dir, "operator-token", token+"\n")
			_, url := c.startNASWith("nas", "operator_token_file: operator-token\nrelay:\n  misfire_grace: 3s\n")
			s := startSink(t, fetchJWKS(t, url))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			client := &http.Client{Timeout: 10 * time.Second}
			at := time.Now().Add(2 * time.Second).Truncate(time.Second)
			stale := []fire{{agent: off.id, job: "stale-1", fireAt: at}, {agent: off.id, job: "stale-2", fireAt: at}}
			fresh := []fire{{agent: off.id, job: "fresh", fireAt: at.Add(4 * time.Second)}}
			other := []fire{{agent: on.id, job: "other", fireAt: at}}
			for _, f := range append(append(stale, fresh...), other...) {
				a := off
				if f.agent == on.id {
					a = on
				}
				if err := provisionFlex(ctx, client, url, a, s.callback(f.agent), f, 0); err != nil {
					t.Fatal(err)
				}
			}
			operator := func(args ...string) (string, error) {
				cmd := exec.Command(bin, append(args, "--nas-url", url, "--operator-token", token)...)
				out, err := cmd.CombinedOutput()
				return string(out), err
			}
			if out, err := operator("agent", "disable", off.id); err != nil {
				t.Fatalf("agent disable: %v: %s", err, out)
			}
			if out, err := operator("agent", "disable", "no-such-agent"); err == nil {
				t.Fatalf("disabling an unknown agent succeeded: %s", out)
			}
			// Its calls are refused as an unknown identity would be.
			for _, call := range []struct {
				method, path string
				body         any
			}{
				{http.MethodPost, contract.PathProvision, map[string]string{"job_id": "new", "fire_at": at.Add(time.Hour).UTC().Format(time.RFC3339), "agent_callback_url": s.callback(off.id), "dedup_key": "new:x"}},
				{http.MethodGet, contract.PathList, nil},
				{http.MethodPost, contract.PathCancel, map[string]string{"job_id": "fresh"}},
			} {
				status, b, err := agentCall(ctx, client, call.method, url+call.path, off, call.body)
				if err != nil || status != http.StatusForbidden || !strings.Contains(string(b), contract.CodeInvalidClient) {
					t.Fatalf("%s %s of a disabled agent: %d %s (%v); want 403 invalid_client", call.method, call.path, status, b, err)
				}
			}
			// The other agent's fire, due with the disabled one's, arrives;
			// the disabled agent's do not.
			s.waitAgent(on.id, 1, 30*time.Second)
			time.Sleep(time.Until(at.Add(4500 * time.Millisecond))) // past the stale fires' grace, before the fresh one's ends
			if got := s.agentLags(off.id); len(got) != 0 {
				t.Fatalf("a disabled agent received %d fires", len(got))
			}
			if out, err := operator("agent", "enable", off.id); err != nil {
				t.Fatalf("agent enable: %v: %s", err, out)
			}
			s.waitAgent(off.id, 1, 30*time.Second)
			if got := s.agentLags(off.id); len(got) != 1 {
				t.Fatalf("after enable the agent received %d fires; want the one within its grace", len(got))
			}
			// The stale ones come back to the agent as failed fires.
			deadline := time.Now().Add(30 * time.Second)
			for {
				status, b, err := agentCall(ctx, client, http.MethodGet, url+contract.PathList, off, nil)
				if err != nil || status != http.StatusOK {
					t.Fatalf("list after enable: %d %s (%v)", status, b, err)
				}
				var list contract.ListResponse
				if err := json.Unmarshal(b, &list); err != nil {
					t.Fatal(err)
				}
				if len(list.FailedFires) == 2 {
					for _, ff := range list.FailedFires {
						if !strings.Contains(ff.Reason, "misfire grace") {
							t.Fatalf("failed fire %+v: want the misfire grace as its reason", ff)
						}
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("failed fires after enable: %s; want the two stale ones", b)
				}
				time.Sleep(100 * time.Millisecond) // the dispatcher dead-letters them on its next claim
			}
		})
	}
}
