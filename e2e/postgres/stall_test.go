package postgrese2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/internal/pgtest"
)

// TestStalledPostgres freezes PostgreSQL (SIGSTOP to the postmaster and
// every backend) for 3 seconds when a third of a burst has arrived:
// provision answers 503 store_unavailable within 2 s, and once the server
// runs again (SIGCONT) every armed fire reaches its agent and is claimed
// once.
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

	probed := c.agents[:2]
	probes := []contract.ProvisionRequest{outageProbe(probed[0]), outageProbe(probed[1])}
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
		paused := time.Now()
		for i, a := range probed {
			checkUnavailable(t, url, a, probes[i], fmt.Sprintf("PostgreSQL is stalled (probe %d)", i+1))
		}
		time.Sleep(time.Until(paused.Add(stall))) // the stall's length
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
	for i, a := range probed {
		repeatProbe(t, e, url, a, probes[i])
	}
	s.mustArrive(t, e, n, 45*time.Second)
	checkDelivered(t, s, fires, acked)
	waitEmpty(t, e, 3*lease+5*time.Second)
}
