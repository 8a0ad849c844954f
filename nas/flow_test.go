package nas_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/nas"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/memory"
)

// TestParseAgentsPolicyFields: parallelism, rate and disabled are read,
// checked and gathered per agent; a value out of range, or entries of one
// agent that disagree, refuse the file with a message naming the entry.
func TestParseAgentsPolicyFields(t *testing.T) {
	t.Parallel()
	h1, h2 := nas.TokenSHA256("one"), nas.TokenSHA256("two")
	entry := func(agent, hash, extra string) string {
		return "- {agent_id: " + agent + ", instance_id: i-" + hash[:6] + ", token_sha256: " + hash + extra + "}\n"
	}
	tests := []struct {
		name    string
		file    string
		want    map[string]nas.FilePolicy // nil: refused
		wantErr []string
	}{
		{name: "no policy fields", file: entry("a", h1, ""), want: map[string]nas.FilePolicy{"a": {}}},
		{name: "every field", file: entry("a", h1, ", parallelism: 2, rate: 0.5, disabled: true"),
			want: map[string]nas.FilePolicy{"a": {Parallelism: new(2), Rate: new(0.5), Disabled: true}}},
		{name: "two instances agree", file: entry("a", h1, ", parallelism: 3") + entry("a", h2, ", parallelism: 3, rate: 7"),
			want: map[string]nas.FilePolicy{"a": {Parallelism: new(3), Rate: new(7.0)}}},
		{name: "zero parallelism", file: entry("a", h1, ", parallelism: 0"), wantErr: []string{"entry 0 (a)", "parallelism 0 must be at least 1"}},
		{name: "negative parallelism", file: entry("a", h1, ", parallelism: -1"), wantErr: []string{"parallelism -1"}},
		{name: "zero rate", file: entry("a", h1, ", rate: 0"), wantErr: []string{"entry 0 (a)", "rate 0 must be a positive number"}},
		{name: "negative rate", file: entry("a", h1, ", rate: -2"), wantErr: []string{"rate -2"}},
		{name: "rate not a number", file: entry("a", h1, ", rate: fast"), wantErr: []string{"line 1", "into float64"}},
		{name: "disabled not a boolean", file: entry("a", h1, ", disabled: maybe"), wantErr: []string{"line 1", "into bool"}},
		{name: "instances disagree on parallelism", file: entry("a", h1, ", parallelism: 1") + entry("a", h2, ", parallelism: 2"),
			wantErr: []string{"entry 1 (a)", "parallelism 2 differs from 1"}},
		{name: "instances disagree on disabled", file: entry("a", h1, ", disabled: true") + entry("a", h2, ""),
			wantErr: []string{"entry 1 (a)", "disabled differs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			entries, err := nas.ParseAgents([]byte(tt.file))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("parsed: %+v", entries)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f, err := nas.NewStaticAgents(entries)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := f.AgentPolicies()
			if len(got) != len(tt.want) {
				t.Fatalf("policies %+v, want %+v", got, tt.want)
			}
			for a, w := range tt.want {
				g := got[a]
				if !samePtr(g.Parallelism, w.Parallelism) || !samePtr(g.Rate, w.Rate) || g.Disabled != w.Disabled {
					t.Errorf("%s: %s, want %s", a, showPolicy(g), showPolicy(w))
				}
			}
		})
	}
}

func samePtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func showPolicy(p nas.FilePolicy) string {
	s := fmt.Sprintf("{disabled:%v", p.Disabled)
	if p.Parallelism != nil {
		s += fmt.Sprintf(" parallelism:%d", *p.Parallelism)
	}
	if p.Rate != nil {
		s += fmt.Sprintf(" rate:%v", *p.Rate)
	}
	return s + "}"
}

// flowService is a service on the memory engine whose agents come from the
// agents file at path.
func flowService(t *testing.T, eng relay.Engine, path string) *nas.Service {
	t.Helper()
	ring, err := nas.NewEphemeralKeyRing(nas.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	agents, err := nas.OpenAgentsFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	secret := contract.FormatWebhookSecret([]byte("0123456789abcdef0123456789abcdef"))
	cfg := nas.Config{PublicURL: "https://nas.example.com", Relay: nas.RelayConfig{Secrets: []string{secret}}, OperatorToken: "operator-token-of-the-test"}
	svc, err := nas.New(nas.Options{Config: cfg, Engine: eng, Verifier: nas.MultiVerifier{Opaque: agents}, Keys: ring, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	return svc
}

// TestAgentsFilePolicyReachesTheStore walks the agents file's flow control
// through loads and reloads: NAS writes what the file sets, keeps what it
// does not set (an operator's disable survives a restart), enables an agent
// whose disabled: true a reload removed, resets a field a reload removed,
// refuses to enable an agent the file disables, and refuses its calls.
func TestAgentsFilePolicyReachesTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	path := filepath.Join(t.TempDir(), "agents.yaml")
	mtime := time.Now().Add(-time.Hour)
	write := func(body string) {
		t.Helper()
		mtime = mtime.Add(time.Minute)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	hA, hB := nas.TokenSHA256("tok-a"), nas.TokenSHA256("tok-b")
	line := func(agent, hash, extra string) string {
		return "- {agent_id: " + agent + ", instance_id: inst-" + agent + ", token_sha256: " + hash + extra + "}\n"
	}
	policy := func(agent string) relay.AgentPolicy {
		t.Helper()
		fl, err := eng.AgentFlow(ctx, agent)
		if err != nil {
			t.Fatal(err)
		}
		return fl.Policy
	}
	authorize := func(svc *nas.Service, token string) error {
		_, err := svc.AgentAPI().Authorize(ctx, "Bearer "+token)
		return err
	}
	isDisabledAnswer := func(err error) bool {
		var ce *contract.Error
		return errors.As(err, &ce) && ce.HTTPStatus() == http.StatusForbidden && ce.Code == contract.CodeInvalidClient
	}

	// Load: the file's fields are written; an agent without any gets no policy.
	write(line("a", hA, ", parallelism: 2, rate: 5") + line("b", hB, ", disabled: true"))
	svc := flowService(t, eng, path)
	if p := policy("a"); p != (relay.AgentPolicy{Parallelism: 2, Rate: 5}) {
		t.Fatalf("a after load: %+v", p)
	}
	if p := policy("b"); p != (relay.AgentPolicy{Disabled: true}) {
		t.Fatalf("b after load: %+v", p)
	}
	if err := authorize(svc, "tok-b"); !isDisabledAnswer(err) {
		t.Fatalf("a file-disabled agent's call: %v, want 403 invalid_client", err)
	}
	if err := authorize(svc, "tok-a"); err != nil {
		t.Fatalf("an enabled agent's call: %v", err)
	}
	// The operator cannot enable what the file disables.
	_, err := svc.Operator().EnableAgent(ctx, "b")
	var ce *contract.Error
	if !errors.As(err, &ce) || ce.HTTPStatus() != http.StatusConflict || ce.Code != contract.CodeConflict || !strings.Contains(ce.Description, "agents file") {
		t.Fatalf("enable a file-disabled agent: %v, want 409 conflict naming the agents file", err)
	}
	if p := policy("b"); !p.Disabled {
		t.Fatal("the refused enable changed the store")
	}

	// The operator disables a; a restart (a new process on the same file)
	// does not enable it again, and keeps the file's fields.
	if _, err := svc.Operator().DisableAgent(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	restarted := flowService(t, eng, path)
	if p := policy("a"); p != (relay.AgentPolicy{Parallelism: 2, Rate: 5, Disabled: true}) {
		t.Fatalf("a after a restart: %+v", p)
	}
	if err := authorize(restarted, "tok-a"); !isDisabledAnswer(err) {
		t.Fatalf("the restarted process serves a disabled agent: %v", err)
	}

	// A reload that drops b's disabled: true enables b; one that drops a's
	// rate resets it and keeps the operator's disable.
	write(line("a", hA, ", parallelism: 2") + line("b", hB, ""))
	if err := restarted.Flow().SyncAgents(ctx); err != nil {
		t.Fatal(err)
	}
	if p := policy("b"); p != (relay.AgentPolicy{}) {
		t.Fatalf("b after its disabled: true was removed: %+v", p)
	}
	if p := policy("a"); p != (relay.AgentPolicy{Parallelism: 2, Disabled: true}) {
		t.Fatalf("a after its rate was removed: %+v", p)
	}
	if err := authorize(restarted, "tok-b"); err != nil {
		t.Fatalf("b enabled by the file is still refused: %v", err)
	}
	// The first process learns of it at its next sync.
	if err := svc.Flow().SyncAgents(ctx); err != nil {
		t.Fatal(err)
	}
	if svc.Flow().AgentDisabled("b") || !svc.Flow().AgentDisabled("a") {
		t.Fatalf("the other process: b disabled %v, a disabled %v", svc.Flow().AgentDisabled("b"), svc.Flow().AgentDisabled("a"))
	}
	// Now the operator may enable a.
	if resp, err := restarted.Operator().EnableAgent(ctx, "a"); err != nil || resp.Disabled {
		t.Fatalf("enable a: %+v %v", resp, err)
	}
	if p := policy("a"); p != (relay.AgentPolicy{Parallelism: 2}) {
		t.Fatalf("a enabled: %+v", p)
	}
}

// TestDisableAcrossProcesses: a disable done through one process is
// refused by another sharing the store once it synced (WatchAgents does so
// every AgentsRefreshInterval), never by reading the store per call.
func TestDisableAcrossProcesses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := memory.New(memory.Options{})
	t.Cleanup(func() { _ = eng.Close() })
	path := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(path, []byte("- {agent_id: a, instance_id: i, token_sha256: "+nas.TokenSHA256("tok")+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	one, two := flowService(t, eng, path), flowService(t, eng, path)
	if _, err := one.Operator().DisableAgent(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if !one.Flow().AgentDisabled("a") {
		t.Fatal("the process that disabled it does not know")
	}
	if two.Flow().AgentDisabled("a") {
		t.Fatal("the other process knew before it synced: it read the store")
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); two.Flow().WatchAgents(wctx) }()
	deadline := time.Now().Add(3 * nas.AgentsRefreshInterval)
	for !two.Flow().AgentDisabled("a") {
		if time.Now().After(deadline) {
			t.Fatal("the other process never learnt of the disable")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := two.AgentAPI().Authorize(ctx, "Bearer tok"); err == nil {
		t.Fatal("the other process served a disabled agent")
	}
	cancel()
	<-done
}
