package relay

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StoreEpoch is implemented by engines whose data can vanish under the
// processes using them: a server restarted without persistence, flushed, or
// failed over to a replica that had none of it. Such an engine writes an
// epoch marker when it first initialises an empty store and checks that it
// is still there: a marker gone (or replaced) means every armed fire written
// before may be gone, which nothing else would notice (an empty store looks
// healthy). The embedded engine, whose data lives and dies with its process,
// does not implement it.
type StoreEpoch interface {
	// CheckEpoch checks the store's epoch marker and reports whether a loss
	// of the store's data is being reported (by this process or any other
	// sharing the store).
	CheckEpoch(ctx context.Context) (EpochStatus, error)
}

// EpochStatus is what CheckEpoch found.
type EpochStatus struct {
	// Lost is true while a loss of the store's data is reported: for a
	// fixed time after a process found the epoch marker gone or replaced.
	Lost bool
	// Since is when the loss was found, Until when its report ends (by the
	// store's clock); both are zero unless Lost.
	Since, Until time.Time
	// Reason says what was found: the marker was gone (a restart without
	// persistence, a flush) or replaced (another process found it gone
	// first, or the data was restored from elsewhere).
	Reason string
}

// ReadyWithin bounds the store's part of a readiness check (CheckStore), so
// that /readyz answers within a second even while a store node is down.
const ReadyWithin = 800 * time.Millisecond

// ShardChecker is implemented by engines whose data is spread over store
// nodes that fail one by one (a Redis Cluster's masters).
type ShardChecker interface {
	// ShardsDown returns nil when every shard's node answers within ctx,
	// else an error wrapping ErrUnavailable that names the shards whose
	// node does not.
	ShardsDown(ctx context.Context) error
}

// CheckStore is the store's part of a process's readiness, as NAS and a
// relay process report it: "store" fails while e does not answer and, on an
// engine that implements StoreEpoch, "store_epoch" fails while a loss of
// the store's data is reported or cannot be checked.
//
// It answers within ReadyWithin whatever the store does: a store node that
// is down or does not answer fails "store" by then, naming the shards it
// serves on an engine that implements ShardChecker.
func CheckStore(ctx context.Context, e Engine) map[string]error {
	ctx, cancel := context.WithTimeout(ctx, ReadyWithin)
	defer cancel()
	checks := map[string]error{"store": nil}
	var err error
	if sc, ok := e.(ShardChecker); ok {
		err = sc.ShardsDown(ctx)
	}
	if err == nil {
		_, err = e.Stats(ctx)
	}
	if err != nil {
		checks["store"] = fmt.Errorf("store: %w", err)
	}
	ep, ok := e.(StoreEpoch)
	if !ok {
		return checks
	}
	if err != nil {
		checks["store_epoch"] = errors.New("not checked: the store did not answer")
		return checks
	}
	st, err := ep.CheckEpoch(ctx)
	switch {
	case err != nil:
		checks["store_epoch"] = fmt.Errorf("not checked: %w", err)
	case st.Lost:
		checks["store_epoch"] = fmt.Errorf("the store lost its data at %s (%s); armed fires may be gone until agents arm them again; reported until %s",
			st.Since.UTC().Format(time.RFC3339), st.Reason, st.Until.UTC().Format(time.RFC3339))
	default:
		checks["store_epoch"] = nil
	}
	return checks
}
