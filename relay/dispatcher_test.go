package relay_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
	"github.com/chronoscron/chronos/relay/relaytest"
)

// The dispatcher's behaviour tests are relaytest.RunDispatcherSuite, run by
// each engine's package against that engine. Here: the HTTP deliverer.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// quiet discards logs.
var quiet = slog.New(slog.DiscardHandler)

// Relay secrets: the deliverer signs with the keys it is given; the relay
// route stand-in knows only the next one, as in the middle of a rotation.
var (
	oldKey  = []byte("old-relay-secret-0123456789abcdef")
	nextKey = []byte("next-relay-secret-0123456789abcdef")
)

func TestHTTPDelivererSignsAndMaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		keys [][]byte
		rep  relaytest.Reply
		kind relay.OutcomeKind
		wait time.Duration
	}{
		{"delivered", [][]byte{oldKey, nextKey}, relaytest.Delivered, relay.Done, 0},
		{"signed with the next key only", [][]byte{nextKey}, relaytest.Delivered, relay.Done, 0},
		{"unknown key is refused and retried late", [][]byte{oldKey}, relaytest.Delivered, relay.Retry, time.Hour},
		{"429 with Retry-After", [][]byte{nextKey}, relaytest.Reply{Status: 429, RetryAfter: "9", Body: `{"error":"rate_limited"}`}, relay.Retry, 9 * time.Second},
		{"400 is dead", [][]byte{nextKey}, relaytest.Reply{Status: 400, Body: `{"error":"invalid_request"}`}, relay.Dead, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := relaytest.NewRelayRoute(t, [][]byte{nextKey}, func(contract.RelayRequest, int) relaytest.Reply { return tc.rep })
			d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{
				NASURL: n.URL() + "/", Keys: tc.keys, UnauthorizedDelay: time.Hour, Logger: quiet,
			})
			if err != nil {
				t.Fatalf("deliverer: %v", err)
			}
			defer d.Close()
			l := relay.Lease{OneShot: relay.OneShot{ScheduleID: "s1", AgentID: "a1", JobID: "j1",
				FireAt: time.Date(2026, 6, 1, 9, 0, 0, 500_000_000, time.UTC), Attempt: 3}, Token: 42}
			out := d.Deliver(context.Background(), l)
			if out.Kind != tc.kind || out.RetryAfter != tc.wait {
				t.Fatalf("outcome %+v, want kind %s wait %s", out, tc.kind, tc.wait)
			}
			if tc.kind == relay.Retry && tc.wait == time.Hour {
				return // refused before it was recorded
			}
			c := n.Calls()[0]
			want := contract.RelayRequest{ScheduleID: "s1", AgentID: "a1", JobID: "j1", FireAt: contract.NewTime(l.FireAt), Attempt: 3}
			if c.ID != "s1.42" || c.Req != want {
				t.Fatalf("call id %q body %+v, want s1.42 %+v", c.ID, c.Req, want)
			}
		})
	}
}

func TestHTTPDelivererNetworkErrorsRetry(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	url := srv.URL
	srv.Close() // nothing listens there any more
	d, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: url, Keys: [][]byte{nextKey}, Timeout: time.Second, Logger: quiet})
	if err != nil {
		t.Fatalf("deliverer: %v", err)
	}
	defer d.Close()
	out := d.Deliver(context.Background(), relay.Lease{OneShot: relay.OneShot{ScheduleID: "s", FireAt: time.Now()}})
	if out.Kind != relay.Retry || out.ColdStart || !strings.Contains(out.Reason, "relay call") {
		t.Fatalf("outcome %+v, want a plain retry", out)
	}

	slow := relaytest.NewRelayRoute(t, [][]byte{nextKey}, func(contract.RelayRequest, int) relaytest.Reply {
		return relaytest.Reply{Status: 200, Body: `{"status":"delivered"}`, Hold: time.Second}
	})
	d2, err := relay.NewHTTPDeliverer(relay.HTTPDelivererConfig{NASURL: slow.URL(), Keys: [][]byte{nextKey}, Timeout: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatalf("deliverer: %v", err)
	}
	defer d2.Close()
	start := time.Now()
	out = d2.Deliver(context.Background(), relay.Lease{OneShot: relay.OneShot{ScheduleID: "s", FireAt: time.Now()}})
	if out.Kind != relay.Retry || time.Since(start) > 900*time.Millisecond {
		t.Fatalf("outcome %+v after %s, want a retry at the 50ms timeout", out, time.Since(start))
	}
}

func TestNewHTTPDelivererValidates(t *testing.T) {
	t.Parallel()
	for _, cfg := range []relay.HTTPDelivererConfig{
		{NASURL: "", Keys: [][]byte{nextKey}},
		{NASURL: "ftp://nas", Keys: [][]byte{nextKey}},
		{NASURL: "http://nas?x=1", Keys: [][]byte{nextKey}},
		{NASURL: "http://nas"},
		{NASURL: "http://nas", Keys: [][]byte{{}}},
		{NASURL: "http://nas", Keys: [][]byte{nextKey}, Timeout: -1},
	} {
		if _, err := relay.NewHTTPDeliverer(cfg); err == nil {
			t.Errorf("NewHTTPDeliverer(%+v) accepted", cfg)
		}
	}
}
