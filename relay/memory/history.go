package memory

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/chronoscron/chronos/relay"
)

var _ relay.History = (*Engine)(nil)

// history is the memory engine's relay.History state: minutes by their
// start (Unix minutes), each agent's recent deliveries (oldest first) and
// the processes' beats. It has a lock of its own: history never waits for
// a claim.
type history struct {
	minutes map[int64]*relay.HistoryMinute
	recent  map[string][]relay.DeliveryRecord
	beats   map[string]relay.ProcessBeat
}

// deliveryHistory is the engine's relay.History. It has a lock of its own:
// history never waits for a claim.
type deliveryHistory struct {
	now func() time.Time // the engine's clock

	// history is the delivery history, made on first use, under histMu.
	histMu  sync.Mutex
	history *history
}

// hist returns the engine's history state, made on first use; the caller
// holds dh.histMu.
func (dh *deliveryHistory) hist() *history {
	if dh.history == nil {
		dh.history = &history{minutes: map[int64]*relay.HistoryMinute{}, recent: map[string][]relay.DeliveryRecord{},
			beats: map[string]relay.ProcessBeat{}}
	}
	return dh.history
}

// AddHistory implements relay.History.
func (dh *deliveryHistory) AddHistory(ctx context.Context, minutes []relay.HistoryMinute, recent []relay.DeliveryRecord) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: add history: %w", err)
	}
	dh.histMu.Lock()
	defer dh.histMu.Unlock()
	h := dh.hist()
	for _, m := range minutes {
		k := m.Minute.Unix() / 60
		cur := h.minutes[k]
		if cur == nil {
			cur = &relay.HistoryMinute{Minute: time.Unix(k*60, 0).UTC()}
			h.minutes[k] = cur
		}
		cur.Add(m)
	}
	for _, r := range recent {
		list := append(h.recent[r.AgentID], r)
		if len(list) > relay.HistoryRecent {
			list = append(list[:0:0], list[len(list)-relay.HistoryRecent:]...)
		}
		h.recent[r.AgentID] = list
	}
	// Forget what is past the retention.
	oldest := dh.now().Add(-relay.HistoryRetention)
	for k, m := range h.minutes {
		if m.Minute.Before(oldest) {
			delete(h.minutes, k)
		}
	}
	for a, list := range h.recent {
		if len(list) > 0 && list[len(list)-1].At.Before(oldest) {
			delete(h.recent, a)
		}
	}
	return nil
}

// HistoryMinutes implements relay.History.
func (dh *deliveryHistory) HistoryMinutes(ctx context.Context, from, to time.Time) ([]relay.HistoryMinute, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: history minutes: %w", err)
	}
	dh.histMu.Lock()
	defer dh.histMu.Unlock()
	var out []relay.HistoryMinute
	for _, m := range dh.hist().minutes {
		if !m.Minute.Before(from) && m.Minute.Before(to) {
			c := relay.HistoryMinute{Minute: m.Minute}
			c.Add(*m)
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minute.Before(out[j].Minute) })
	return out, nil
}

// RecentDeliveries implements relay.History.
func (dh *deliveryHistory) RecentDeliveries(ctx context.Context, agentID string, max int) ([]relay.DeliveryRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: recent deliveries: %w", err)
	}
	if max <= 0 || max > relay.HistoryRecent {
		max = relay.HistoryRecent
	}
	dh.histMu.Lock()
	defer dh.histMu.Unlock()
	list := dh.hist().recent[agentID]
	out := make([]relay.DeliveryRecord, 0, min(max, len(list)))
	for i := len(list) - 1; i >= 0 && len(out) < max; i-- {
		out = append(out, list[i])
	}
	return out, nil
}

// LastDeliveries implements relay.History.
func (dh *deliveryHistory) LastDeliveries(ctx context.Context) (map[string]relay.DeliveryRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: last deliveries: %w", err)
	}
	dh.histMu.Lock()
	defer dh.histMu.Unlock()
	out := make(map[string]relay.DeliveryRecord, len(dh.hist().recent))
	for a, list := range dh.hist().recent {
		if len(list) > 0 {
			out[a] = list[len(list)-1]
		}
	}
	return out, nil
}

// Beat implements relay.History.
func (dh *deliveryHistory) Beat(ctx context.Context, p relay.ProcessBeat) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: beat: %w", err)
	}
	dh.histMu.Lock()
	defer dh.histMu.Unlock()
	dh.hist().beats[p.ID] = p
	return nil
}

// Processes implements relay.History.
func (dh *deliveryHistory) Processes(ctx context.Context, since time.Time) ([]relay.ProcessBeat, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: processes: %w", err)
	}
	dh.histMu.Lock()
	defer dh.histMu.Unlock()
	h := dh.hist()
	out := make([]relay.ProcessBeat, 0, len(h.beats))
	for id, p := range h.beats {
		if p.BeatAt.Before(since) {
			delete(h.beats, id)
			continue
		}
		out = append(out, p)
	}
	relay.SortBeats(out)
	return out, nil
}
