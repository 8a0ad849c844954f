package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chronoscron/chronos/agent/ledger"
	"github.com/chronoscron/chronos/contract"
)

// Event types of GET /api/events.
const (
	// EventRun carries one ledger line (a ledger.Entry) as it is written,
	// by this agent or by another process on its home.
	EventRun = "run"
	// EventChain carries one ledger line of kind chain (a ledger.Entry): a
	// chain started, spawned a step, was refused, cooled down or closed, a
	// step was skipped, or a class's breaker opened, closed or was reset.
	EventChain = "chain"
	// EventJob carries a job that was added or changed (a JobInfo, its env
	// values redacted: read the job with reveal=env for them).
	EventJob = "job"
	// EventJobRemoved carries {"id": ...} of a job that was removed.
	EventJobRemoved = "job_removed"
	// EventReset says events were lost for this client (it resumed from an
	// id older than the agent keeps, or from an earlier agent process): it
	// should read the state again.
	EventReset = "reset"
)

// EventOptions tune the event stream. Zero fields take the defaults stated.
type EventOptions struct {
	// Keep is how many recent events are kept for clients that resume
	// with Last-Event-ID (default 4096).
	Keep int
	// ClientBuffer is how many events may wait for one client; a client
	// further behind is cut off and resumes with Last-Event-ID (default
	// 256).
	ClientBuffer int
	// Heartbeat is how often an idle stream gets a comment line (default
	// 15 s).
	Heartbeat time.Duration
}

// Event is one event of the stream.
type Event struct {
	ID   uint64
	Type string
	Data json.RawMessage
}

// hub keeps recent events and fans them out to clients.
type hub struct {
	o      EventOptions
	mu     sync.Mutex
	next   uint64
	ring   []Event // the last o.Keep events, oldest first
	subs   map[chan Event]struct{}
	closed bool
}

func newHub(o EventOptions) *hub {
	if o.Keep <= 0 {
		o.Keep = 4096
	}
	if o.ClientBuffer <= 0 {
		o.ClientBuffer = 256
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	// Ids go on from the start time in microseconds, so an id of an earlier
	// process of this agent is below every id of this one.
	return &hub{o: o, next: uint64(time.Now().UnixMicro()), subs: map[chan Event]struct{}{}}
}

// publish numbers and keeps an event and hands it to every client; a
// client whose buffer is full is cut off (its channel closed).
func (h *hub) publish(typ string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.next++
	ev := Event{ID: h.next, Type: typ, Data: data}
	if len(h.ring) == h.o.Keep {
		copy(h.ring, h.ring[1:])
		h.ring = h.ring[:len(h.ring)-1]
	}
	h.ring = append(h.ring, ev)
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

// subscribe returns the kept events after id *after (nil: none from the
// past, only new ones), a channel of the new ones and whether events after
// *after were lost.
func (h *hub) subscribe(after *uint64) ([]Event, chan Event, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan Event, h.o.ClientBuffer)
	if h.closed {
		close(ch)
		return nil, ch, false
	}
	h.subs[ch] = struct{}{}
	if after == nil {
		return nil, ch, false
	}
	last := *after
	lost := len(h.ring) == 0 && last < h.next || len(h.ring) > 0 && last+1 < h.ring[0].ID
	var back []Event
	for _, ev := range h.ring {
		if ev.ID > last {
			back = append(back, ev)
		}
	}
	return back, ch, lost
}

func (h *hub) unsubscribe(ch chan Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[ch]; ok {
		delete(h.subs, ch)
		close(ch)
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

// follow publishes every run and chain line appended to the home's ledger
// (by this agent as it writes them, by other processes within the
// runtime's WatchInterval) and every job change, until ctx ends.
func (s *Server) follow(ctx context.Context) {
	s.rt.Ledger().ObserveAll(func(e ledger.Entry) {
		switch e.Kind {
		case "":
			s.hub.publish(EventRun, e)
		case ledger.KindChain:
			s.hub.publish(EventChain, e)
		}
	})
	changes, stop := s.rt.Subscribe()
	known := s.snapshot(ctx, nil)
	s.wg.Go(func() {
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changes:
			}
			known = s.snapshot(ctx, known)
		}
	})
}

// snapshot reads the jobs and publishes those that differ from known (nil:
// publish nothing), and the removed ones. It returns the new snapshot. A
// job is compared whole (a change of an env value is published) and
// published with its env values redacted.
func (s *Server) snapshot(ctx context.Context, known map[string][]byte) map[string][]byte {
	jobs, err := s.rt.Jobs(ctx)
	if err != nil {
		return known
	}
	now := make(map[string][]byte, len(jobs))
	for i := range jobs {
		in := s.info(ctx, &jobs[i])
		b, err := json.Marshal(in)
		if err != nil {
			continue
		}
		now[in.ID] = b
		if known != nil && !bytes.Equal(known[in.ID], b) {
			s.hub.publish(EventJob, redacted(in))
		}
	}
	for id := range known {
		if _, ok := now[id]; !ok {
			s.hub.publish(EventJobRemoved, map[string]string{"id": id})
		}
	}
	return now
}

// events streams the events: those after Last-Event-ID (header, or the
// last_event_id query parameter) first, then new ones as they happen, with
// heartbeat comments while idle.
func (s *Server) events(c echo.Context) error {
	r := c.Request()
	lastText := r.Header.Get("Last-Event-ID")
	if lastText == "" {
		lastText = c.QueryParam("last_event_id")
	}
	var after *uint64
	if lastText != "" {
		n, err := strconv.ParseUint(lastText, 10, 64)
		if err != nil {
			return contract.BadRequest(contract.CodeInvalidRequest, "Last-Event-ID %q is not an event id of this API", lastText)
		}
		after = &n
	}
	back, ch, lost := s.hub.subscribe(after)
	defer s.hub.unsubscribe(ch)
	w := c.Response()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, "retry: 1000\n\n")
	if lost {
		fmt.Fprintf(w, "event: %s\ndata: {}\n\n", EventReset)
	}
	for _, ev := range back {
		writeEvent(w, ev)
	}
	w.Flush()
	beat := time.NewTicker(s.hub.o.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return nil // cut off, or the agent is stopping: the client resumes
			}
			writeEvent(w, ev)
		case <-beat.C:
			fmt.Fprintf(w, ": heartbeat %s\n\n", time.Now().UTC().Format(time.RFC3339))
		}
		w.Flush()
	}
}

func writeEvent(w http.ResponseWriter, ev Event) {
	fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.ID, ev.Type, ev.Data)
}
