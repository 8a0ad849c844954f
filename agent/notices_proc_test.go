package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/runner"
)

// TestKilledAgentNotifiesOnce SIGKILLs an agent process after its run's
// success is durable and while the run's notification is on the wire (the
// receiver holds the request, so it never answers the dead agent). A new
// agent process on the home takes the notification over once the dead
// claim's lease ends and delivers it with the same webhook-id: the receiver
// accepts that id exactly once, and the ledger records it sent once.
func TestKilledAgentNotifiesOnce(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		ids      []string
		accepted = map[string]int{}
	)
	first := make(chan struct{})
	release := make(chan struct{})
	delivered := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		mu.Lock()
		ids = append(ids, id)
		n := len(ids)
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release // the agent dies meanwhile: no one hears the answer
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		accepted[id]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
		delivered <- id
	}))
	defer srv.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	home := t.TempDir()
	rt0, err := Open(t.Context(), Config{Home: home, Retention: -1, NotifyAddresses: notify.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = rt0.AddJob(t.Context(), JobSpec{ID: "k9", Schedule: "in 1s",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "echo done"}},
		Notify:  notify.Policy{Targets: []notify.Target{{Kind: notify.KindWebhook, URL: srv.URL, On: []notify.Event{notify.EventSucceeded}}}}})
	if err != nil {
		t.Fatal(err)
	}
	rt0.Close(t.Context())

	flags := []string{"-allow-private", "-notify-lease", "2s"}
	owner := startServe(t, home, flags...)
	select {
	case <-first:
	case <-time.After(20 * time.Second):
		t.Fatal("the notification never reached the receiver")
	}
	if err := owner.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	close(release)

	// The run's end was durable before the notification left.
	lg, _ := ledger.Open(home + "/runs")
	runs, err := lg.Runs(t.Context(), ledger.Filter{JobID: "k9"})
	if err != nil || len(runs) != 1 || runs[0].State != ledger.StateSucceeded {
		t.Fatalf("runs %+v %v", runs, err)
	}
	mu.Lock()
	want := ids[0]
	mu.Unlock()

	next := startServe(t, home, flags...)
	select {
	case id := <-delivered:
		if id != want {
			t.Fatalf("delivered %s, want %s", id, want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the restarted agent did not deliver the notification")
	}
	// The agent records the answer; then it is stopped cleanly (its ledger
	// lines are written, nothing more is sent).
	box, err := notify.OpenFileOutbox(notify.HomeDir(home), notify.FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		row, err := box.Get(context.Background(), want)
		if err != nil {
			t.Fatal(err)
		}
		if row.State == notify.StateSent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the delivery was not recorded: %+v", row)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := next.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := next.Wait(); err != nil {
		t.Fatalf("agent: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if id != want {
			t.Fatalf("webhook-ids %v, want all %s", ids, want)
		}
	}
	if accepted[want] != 1 {
		t.Fatalf("receiver accepted %s %d times, want once", want, accepted[want])
	}
	es, err := lg.Entries(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, e := range es {
		if e.Kind == ledger.KindNotification {
			if e.State != ledger.StateSent || e.Notification != want {
				t.Fatalf("notification line %+v", e)
			}
			sent++
		}
	}
	if sent != 1 {
		t.Fatalf("%d sent lines, want 1", sent)
	}
	if row, err := box.Get(context.Background(), want); err != nil || row.State != notify.StateSent || row.Attempts != 1 {
		// The killed agent's attempt was never recorded: only the
		// delivery that was answered counts.
		t.Fatalf("outbox row %+v %v, want sent after one recorded attempt", row, err)
	}
}

// TestTwoAgentProcessesNotifyOnce runs two agent processes on one home:
// both fire the job's slots (each slot runs once) and both drain the
// outbox; every notification reaches the receiver exactly once.
func TestTwoAgentProcessesNotifyOnce(t *testing.T) {
	t.Parallel()
	const want = 4
	var (
		mu       sync.Mutex
		accepted = map[string]int{}
	)
	enough := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepted[r.Header.Get("webhook-id")]++
		if len(accepted) == want {
			close(enough)
		}
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	home := t.TempDir()
	rt0, err := Open(t.Context(), Config{Home: home, Retention: -1, NotifyAddresses: notify.AddressPolicy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = rt0.AddJob(t.Context(), JobSpec{ID: "both", Schedule: "every 1s",
		Payload: runner.Payload{Kind: runner.KindShell, Shell: &runner.Shell{Command: "true"}},
		Notify:  notify.Policy{Targets: []notify.Target{{Kind: notify.KindWebhook, URL: srv.URL, On: []notify.Event{notify.EventSucceeded}}}}})
	if err != nil {
		t.Fatal(err)
	}
	rt0.Close(t.Context())
	agents := []*exec.Cmd{startServe(t, home, "-allow-private"), startServe(t, home, "-allow-private")}
	select {
	case <-enough:
	case <-time.After(30 * time.Second):
		t.Fatal("too few notifications arrived")
	}
	for _, a := range agents {
		if err := a.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := a.Wait(); err != nil {
			t.Fatalf("agent: %v", err)
		}
	}
	lg, _ := ledger.Open(home + "/runs")
	es, err := lg.Entries(context.Background(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	sent := map[string]int{}
	succeeded := 0
	for _, e := range es {
		switch {
		case e.Kind == ledger.KindNotification && e.State == ledger.StateSent:
			sent[e.Notification]++
		case e.Kind == "" && e.State == ledger.StateSucceeded:
			succeeded++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range accepted {
		if n != 1 {
			t.Fatalf("%s delivered %d times", id, n)
		}
	}
	// Each sent line is of a delivered id, once. (A delivery answered just
	// as an agent stopped may not be recorded yet: it is still owed; at
	// most one per agent.)
	for id, n := range sent {
		if n != 1 || accepted[id] != 1 {
			t.Fatalf("%s: %d sent lines, delivered %d times", id, n, accepted[id])
		}
	}
	if len(sent) < want-len(agents) || len(accepted) > succeeded {
		t.Fatalf("%d ids delivered, %d sent lines, %d runs succeeded", len(accepted), len(sent), succeeded)
	}
}
