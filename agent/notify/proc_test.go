package notify

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Child processes of the process tests run this binary with these
// variables set and drain the outbox in the named directory.
const (
	envChildDir   = "CHRONOS_NOTIFY_TEST_DIR"
	envChildLease = "CHRONOS_NOTIFY_TEST_LEASE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envChildDir); dir != "" {
		os.Exit(drainChild(dir))
	}
	os.Exit(m.Run())
}

// drainChild drains the outbox in dir until nothing is open.
func drainChild(dir string) int {
	lease, _ := time.ParseDuration(os.Getenv(envChildLease))
	box, err := OpenFileOutbox(dir, FileOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n := New(box, Senders{Webhook: loopbackSender(NewSecret(), time.Now)},
		Options{Owner: "pid-" + strconv.Itoa(os.Getpid()), Lease: lease, Backoff: time.Millisecond})
	ctx := context.Background()
	for {
		next, err := n.Drain(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		open, err := box.Pending(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if len(open) == 0 {
			return 0
		}
		// Rows held by the other process: wait as Run would, not in a
		// tight loop that keeps the lock busy.
		time.Sleep(min(max(time.Until(next), time.Millisecond), 20*time.Millisecond))
	}
}

func drainProcess(t *testing.T, dir string, lease time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildDir+"="+dir, envChildLease+"="+lease.String())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// Two processes draining one home deliver each notification exactly once.
func TestTwoProcessesOneHome(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, 200)
	dir := t.TempDir()
	box, err := OpenFileOutbox(dir, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	const count = 30
	for i := range count {
		if _, err := box.Add(context.Background(), sample(fmt.Sprintf("ntf_%02d", i), Target{Kind: KindWebhook, URL: rcv.srv.URL})); err != nil {
			t.Fatal(err)
		}
	}
	a, b := drainProcess(t, dir, time.Minute), drainProcess(t, dir, time.Minute)
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, d := range rcv.deliveries() {
		seen[d.header.Get("webhook-id")]++
	}
	if len(seen) != count {
		t.Fatalf("%d ids delivered, want %d", len(seen), count)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
	sent, _ := box.List(context.Background(), StateSent)
	if len(sent) != count {
		t.Fatalf("%d rows sent, want %d", len(sent), count)
	}
}

// offsetClock is the system clock moved forward, as if time had passed.
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time                         { return time.Now().Add(c.d) }
func (c offsetClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// kill -9 of a sender while its request is at the receiver: once the
// claim's lease has run out, the next sender delivers the same id once.
func TestKilledSenderResendsOnce(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var ids []string
	arrived := make(chan struct{}, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		ids = append(ids, r.Header.Get("webhook-id"))
		first := len(ids) == 1
		mu.Unlock()
		arrived <- struct{}{}
		if first {
			<-r.Context().Done() // hold the first sender until it dies
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	dir := t.TempDir()
	box, err := OpenFileOutbox(dir, FileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	n := sample("ntf_killed", Target{Kind: KindWebhook, URL: srv.URL})
	if _, err := box.Add(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	const lease = time.Minute
	child := drainProcess(t, dir, lease)
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the child never sent")
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	ctx := context.Background()
	if row, _ := box.Get(ctx, n.ID); row.State != StateSending {
		t.Fatalf("row after the kill: %+v", row)
	}
	later := offsetClock{lease + time.Second}
	box2, err := OpenFileOutbox(dir, FileOptions{Now: later.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer box2.Close()
	next := New(box2, Senders{Webhook: loopbackSender(NewSecret(), later.Now)}, Options{Clock: later, Owner: "restarted"})
	for range 2 {
		if _, err := next.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != 2 || ids[0] != n.ID || ids[1] != n.ID {
		t.Fatalf("deliveries %v, want %s twice (the killed attempt and one resend)", ids, n.ID)
	}
	if row, _ := box2.Get(ctx, n.ID); row.State != StateSent || row.Attempts != 1 || row.Token != 2 {
		t.Fatalf("row %+v", row)
	}
}
