package nas

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLoginClient(t *testing.T) {
	t.Parallel()
	tests := []struct{ remote, want string }{
		{"192.0.2.7:51234", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:443", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:80", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"192.0.2.7", "192.0.2.7"},
		{"@", "@"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := loginClient(tt.remote); got != tt.want {
			t.Errorf("loginClient(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
}

// TestLoginThrottleGlobalBudget: wrong tokens spread over many addresses,
// each within its own budget, spend the global budget; then every login,
// the right token from a fresh address included, is refused until a token
// of the budget refills, and the refusals make one log line per interval.
func TestLoginThrottleGlobalBudget(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	l := newLoginThrottle(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	for i := range LoginGlobalBurst {
		if v := l.attempt(fmt.Sprintf("198.51.100.%d", i%250), now, false); v.Refused {
			t.Fatalf("wrong token %d refused within the global budget", i+1)
		}
	}
	for _, right := range []bool{false, true} {
		v := l.attempt("203.0.113.1", now, right)
		if !v.Refused || v.RetryAfter != time.Second {
			t.Fatalf("right=%v after the global budget: %+v, want refused for 1 s", right, v)
		}
	}
	if n := strings.Count(logs.String(), "every address together"); n != 1 {
		t.Fatalf("%d global log lines, want 1:\n%s", n, logs.String())
	}
	now = now.Add(time.Second)
	if v := l.attempt("203.0.113.1", now, true); v.Refused {
		t.Fatalf("the right token once the budget refilled: %+v", v)
	}
}

// TestLoginThrottleBounded: the addresses remembered never exceed the
// bound; the least recently active is forgotten first (its counts logged),
// and flush forgets addresses idle for LoginForgetAfter.
func TestLoginThrottleBounded(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	l := newLoginThrottle(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	l.max = 3
	for i := range 10 {
		for range 2 {
			l.attempt(fmt.Sprintf("192.0.2.%d", i), now, false)
		}
		now = now.Add(time.Millisecond)
		if len(l.addrs) > l.max || l.order.Len() != len(l.addrs) {
			t.Fatalf("%d addresses (%d in order), bound %d", len(l.addrs), l.order.Len(), l.max)
		}
	}
	for _, kept := range []string{"192.0.2.7", "192.0.2.8", "192.0.2.9"} {
		if _, ok := l.addrs[kept]; !ok {
			t.Errorf("%s, among the most recent, was forgotten", kept)
		}
	}
	// Each forgotten address logged its second failure on the way out.
	if n := strings.Count(logs.String(), "wrong_tokens=1"); n != 10+7 {
		t.Errorf("%d lines with one wrong token, want 17 (10 first failures, 7 forgotten):\n%s", n, logs.String())
	}
	now = now.Add(LoginForgetAfter)
	l.flush(now)
	if len(l.addrs) != 0 || l.order.Len() != 0 {
		t.Fatalf("%d addresses left after they were idle for %s", len(l.addrs), LoginForgetAfter)
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
}
