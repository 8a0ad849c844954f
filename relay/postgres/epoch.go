package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.StoreEpoch = (*Engine)(nil)

// Defaults of Options.LostReportFor and Options.EpochCheck.
const (
	// DefaultLostReportFor is how long a lost store is reported: the
	// default resync interval of agents, by the end of which every awake
	// agent has armed its jobs again.
	DefaultLostReportFor = 5 * time.Minute
	// DefaultEpochCheck is how often an engine checks the epoch marker by
	// itself.
	DefaultEpochCheck = 15 * time.Second
)

// Reasons of a lost store, as relay.EpochStatus.Reason gives them.
const (
	ReasonMarkerGone     = "the store's epoch marker was gone: the schema's tables were emptied, dropped and made again, or restored from a backup without it"
	ReasonMarkerReplaced = "the store's epoch marker was replaced: another process found it gone first, or the data was restored from elsewhere"
)

// epochState is what one engine knows of the epoch marker.
type epochState struct {
	sem           chan struct{} // held by the check under way
	lostReportFor time.Duration
	every         time.Duration // of the background check; negative: none
	known         string        // the marker this engine knows; "" before the first check (under sem)
	reported      time.Time     // when the loss last logged was found; zero when none is reported (under sem)
}

// newEpochState returns the epoch state of an engine with the given
// options (zero: the defaults).
func newEpochState(lostReportFor, every time.Duration) *epochState {
	if lostReportFor <= 0 {
		lostReportFor = DefaultLostReportFor
	}
	if every == 0 {
		every = DefaultEpochCheck
	}
	return &epochState{sem: make(chan struct{}, 1), lostReportFor: lostReportFor, every: every}
}

// CheckEpoch implements relay.StoreEpoch (chronos_check_epoch, one
// statement). The first check of an engine adopts the store's marker
// (writing one into an empty store); a later one that finds it gone or
// replaced reports the loss to every engine of the schema for
// Options.LostReportFor. The first check that sees a report logs it as
// an error, and the first after it ends says so.
func (c *control) CheckEpoch(ctx context.Context) (relay.EpochStatus, error) {
	s := c.epoch
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-ctx.Done():
		return relay.EpochStatus{}, fail("check epoch", ctx.Err())
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	fresh := "ep_" + hex.EncodeToString(b[:])
	var (
		marker string
		nowMs  int64
		lost   *string
	)
	err := c.pool.QueryRow(ctx, `SELECT marker, now_ms, lost FROM chronos_check_epoch($1, $2, $3, $4)`,
		s.known, fresh, s.lostReportFor.Milliseconds(), c.now()).Scan(&marker, &nowMs, &lost)
	if err != nil {
		return relay.EpochStatus{}, fail("check epoch", err)
	}
	var st relay.EpochStatus
	if lost != nil {
		if st, err = lostReport(*lost); err != nil {
			return relay.EpochStatus{}, fail("check epoch", err)
		}
	}
	s.known = marker
	switch {
	case st.Lost && !st.Since.Equal(s.reported):
		s.reported = st.Since
		c.log.ErrorContext(ctx, "relay store lost its data: armed fires may be gone; agents arm theirs again when they next reconcile",
			"schema", c.schema, "reason", st.Reason, "since", st.Since, "reported_until", st.Until)
	case !st.Lost && !s.reported.IsZero():
		s.reported = time.Time{}
		c.log.InfoContext(ctx, "relay store loss no longer reported", "schema", c.schema)
	}
	return st, nil
}

// lostReport reads the report of a lost store: "<since ms> <until ms>
// <gone|replaced>".
func lostReport(v string) (relay.EpochStatus, error) {
	f := strings.Fields(v)
	if len(f) != 3 {
		return relay.EpochStatus{}, fmt.Errorf("lost report %q", v)
	}
	since, err1 := strconv.ParseInt(f[0], 10, 64)
	until, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return relay.EpochStatus{}, fmt.Errorf("lost report %q", v)
	}
	reason := ReasonMarkerGone
	if f[2] == "replaced" {
		reason = ReasonMarkerReplaced
	}
	return relay.EpochStatus{Lost: true, Since: fromMs(since), Until: fromMs(until), Reason: reason}, nil
}

// watchEpoch checks the epoch marker every Options.EpochCheck until the
// engine closes, so that a lost store is logged even when nobody asks.
func (c *control) watchEpoch() {
	every := c.epoch.every
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(every, 5*time.Second))
		if _, err := c.CheckEpoch(ctx); err != nil {
			c.log.Debug("relay store epoch not checked", "err", err)
		}
		cancel()
	}
}
