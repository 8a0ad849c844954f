package postgrese2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/internal/pgtest"
)

// TestStalledPostgres freezes PostgreSQL (SIGSTOP to the postmaster and
// every backend) for 3 seconds when a third of a burst has arrived, longer
// than the relay's leases: once the server runs again (SIGCONT) every armed
// fire reaches its agent and is claimed once, and nothing is left in the
// store.
func TestStalledPostgres(t *testing.T) {
	n, spread := faultBurst()
	n /= 3
	const lease = 2 * time.Second
	const stall = 3 * time.Second
	srv := pgtest.Start(t)
	store := storeOn(t, srv.URL())
	c := newCluster(t, store, 10)
	_, url := c.startNAS("nas", relayOnly)
	c.startRelay("relay", "nas", lease)
	s := startSink(t, fetchJWKS(t, url))
	e := openStore(t, store)

	var fault sync.WaitGroup
	fault.Go(func() {
		if !s.waitFor(time.Minute, s.arrived(n/3)) {
			t.Errorf("a third of the fires did not arrive")
			return
		}
		before, _ := s.counts()
		if err := srv.Pause(); err != nil {
			t.Errorf("pause: %v", err)
			return
		}
		time.Sleep(stall) // the stall's length
		during, _ := s.counts()
		if err := srv.Resume(); err != nil {
			t.Errorf("resume: %v", err)
		}
		t.Logf("%d of %d fires arrived before the stall, %d during it", before, n, during-before)
	})
	first := time.Now().Add(3 * time.Second)
	fires := plan(c.agents, n, first, spread)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acked := armAll(ctx, t, []string{url}, c, s, fires, 8, nil)
	fault.Wait()
	s.mustArrive(t, e, n, 45*time.Second)
	checkDelivered(t, s, fires, acked)
	waitEmpty(t, e, 3*lease+5*time.Second)
}
