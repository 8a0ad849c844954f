package relay

import (
	"strings"
	"testing"
	"time"
)

// low and high are jitter sources that always draw the least and the most.
func low(int64) int64    { return 0 }
func high(n int64) int64 { return n - 1 }

func TestRetryPolicyNext(t *testing.T) {
	t.Parallel()
	fireAt := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	now := fireAt.Add(time.Minute)
	p := RetryPolicy{Base: time.Second, MaxDelay: 10 * time.Second, MaxAttempts: 8, MaxAge: time.Hour}.WithDefaults()
	for _, tc := range []struct {
		name    string
		attempt int
		out     Outcome
		at      time.Time
		rnd     func(int64) int64
		want    time.Duration
		giveUp  bool
	}{
		{"first failure is Base", 1, Outcome{Kind: Retry}, now, high, time.Second, false},
		{"third failure low", 3, Outcome{Kind: Retry}, now, low, time.Second, false},
		{"third failure high", 3, Outcome{Kind: Retry}, now, high, 4 * time.Second, false},
		{"capped at MaxDelay", 7, Outcome{Kind: Retry}, now, high, 10 * time.Second, false},
		{"attempt 0 counts as 1", 0, Outcome{Kind: Retry}, now, high, time.Second, false},
		{"cold start first", 1, Outcome{Kind: Retry, ColdStart: true}, now, low, 250 * time.Millisecond, false},
		{"cold start first jittered", 1, Outcome{Kind: Retry, ColdStart: true}, now, high, 300 * time.Millisecond, false},
		{"cold start third", 3, Outcome{Kind: Retry, ColdStart: true}, now, low, time.Second, false},
		{"cold start then the ladder from Base", 4, Outcome{Kind: Retry, ColdStart: true}, now, high, time.Second, false},
		{"cold start later ladder", 6, Outcome{Kind: Retry, ColdStart: true}, now, high, 4 * time.Second, false},
		{"Retry-After is a floor", 1, Outcome{Kind: Retry, RetryAfter: 5 * time.Second}, now, high, 5 * time.Second, false},
		{"Retry-After beyond MaxDelay", 1, Outcome{Kind: Retry, RetryAfter: time.Minute}, now, high, time.Minute, false},
		{"Retry-After below the ladder", 3, Outcome{Kind: Retry, RetryAfter: time.Millisecond}, now, high, 4 * time.Second, false},
		{"attempts spent", 8, Outcome{Kind: Retry}, now, high, 0, true},
		{"too old", 1, Outcome{Kind: Retry}, fireAt.Add(time.Hour - 500*time.Millisecond), high, 0, true},
		{"just young enough", 1, Outcome{Kind: Retry}, fireAt.Add(time.Hour - time.Second), high, time.Second, false},
		{"Retry-After past the age", 1, Outcome{Kind: Retry, RetryAfter: time.Hour}, now, high, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := Lease{OneShot: OneShot{FireAt: fireAt, Attempt: tc.attempt}}
			got, ok := p.Next(l, tc.out, tc.at, tc.rnd)
			if ok == tc.giveUp || got != tc.want {
				t.Fatalf("Next = %s, %v; want %s, %v", got, ok, tc.want, !tc.giveUp)
			}
		})
	}
}

func TestRetryPolicyDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	d := RetryPolicy{}.WithDefaults()
	if d.Base != time.Second || d.MaxDelay != 5*time.Minute || d.MaxAttempts != 10 || d.MaxAge != 24*time.Hour || len(d.ColdStart) != 3 {
		t.Fatalf("defaults %+v", d)
	}
	if n := (RetryPolicy{NoColdStart: true, ColdStart: []time.Duration{time.Second}}).WithDefaults().ColdStart; n != nil {
		t.Fatalf("NoColdStart kept %v", n)
	}
	for _, tc := range []struct {
		p     RetryPolicy
		field string
	}{
		{RetryPolicy{Base: -1}, "Retry.Base"},
		{RetryPolicy{Base: time.Minute, MaxDelay: time.Second}, "Retry.MaxDelay"},
		{RetryPolicy{MaxAttempts: -1}, "Retry.MaxAttempts"},
		{RetryPolicy{MaxAge: -time.Second}, "Retry.MaxAge"},
		{RetryPolicy{ColdStart: []time.Duration{time.Second, 0}}, "Retry.ColdStart[1]"},
	} {
		err := tc.p.WithDefaults().validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("validate(%+v) = %v, want an error naming %s", tc.p, err, tc.field)
		}
	}
	if err := d.validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestDispatcherConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   DispatcherConfig
		field string
	}{
		{DispatcherConfig{Batch: -1}, "Batch"},
		{DispatcherConfig{Concurrency: -1}, "Concurrency"},
		{DispatcherConfig{PerAgent: -2}, "PerAgent"},
		{DispatcherConfig{PerAgentRate: -1}, "PerAgentRate"},
		{DispatcherConfig{MisfireGrace: -time.Second}, "MisfireGrace"},
		{DispatcherConfig{LeaseFor: time.Millisecond}, "LeaseFor"},
		{DispatcherConfig{Retry: RetryPolicy{MaxAttempts: -1}}, "Retry.MaxAttempts"},
	} {
		err := tc.cfg.WithDefaults().validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	const unauth = 5 * time.Minute
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
		body       string
		kind       OutcomeKind
		wait       time.Duration
		cold       bool
		reason     string
	}{
		{"delivered", 200, "", `{"status":"delivered","agent_status":"accepted"}`, Done, 0, false, "delivered: accepted"},
		{"dropped", 200, "", `{"status":"dropped"}`, Done, 0, false, "dropped"},
		{"instance stopped", 200, "", `{"status":"instance_stopped"}`, Done, 0, false, "instance_stopped"},
		{"duplicate", 200, "", `{"status":"duplicate"}`, Done, 0, false, "duplicate"},
		{"rejected", 200, "", `{"status":"rejected","reason":"agent answered 404"}`, Dead, 0, false, "rejected by the agent: agent answered 404"},
		{"unknown status", 200, "", `{"status":"maybe"}`, Retry, 0, false, `unknown status "maybe"`},
		{"not json", 200, "", `<html>`, Retry, 0, false, "not a relay response"},
		{"401", 401, "", `{"error":"invalid_signature"}`, Retry, unauth, false, "nas answered 401: invalid_signature"},
		{"401 asks longer", 401, "3600", ``, Retry, time.Hour, false, "nas answered 401"},
		{"429", 429, "7", `{"error":"rate_limited"}`, Retry, 7 * time.Second, false, "nas answered 429: rate_limited"},
		{"502", 502, "", `{"error":"agent_unavailable","error_description":"agent answered 500"}`, Retry, 0, false, "agent answered 500"},
		{"502 refused", 502, "2", `{"error":"agent_unavailable","error_description":"dial tcp: connection refused"}`, Retry, 2 * time.Second, true, "connection refused"},
		{"503 waking", 503, "1", `{"error":"agent_unavailable"}`, Retry, time.Second, true, "agent_unavailable"},
		{"503 nas busy", 503, "", `{"error":"temporarily_unavailable"}`, Retry, 0, false, "temporarily_unavailable"},
		{"500", 500, "", ``, Retry, 0, false, "nas answered 500"},
		{"redirect", 307, "", ``, Retry, 0, false, "nas answered 307"},
		{"400", 400, "", `{"error":"invalid_request","error_description":"bad"}`, Dead, 0, false, "nas answered 400: invalid_request: bad"},
		{"404", 404, "", ``, Dead, 0, false, "nas answered 404"},
		{"http date", 503, now.Add(90 * time.Second).Format(http1123), ``, Retry, 90 * time.Second, false, "503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := classify(tc.status, tc.retryAfter, []byte(tc.body), now, unauth)
			if got.Kind != tc.kind || got.RetryAfter != tc.wait || got.ColdStart != tc.cold || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("classify = %+v; want kind %s, wait %s, cold %v, reason containing %q", got, tc.kind, tc.wait, tc.cold, tc.reason)
			}
		})
	}
}

// http1123 is the HTTP date layout.
const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"12", 12 * time.Second},
		{" 3 ", 3 * time.Second},
		{"-5", 0},
		{"soon", 0},
		{"99999999999", time.Hour},
		{now.Add(-time.Minute).Format(http1123), 0},
		{now.Add(2 * time.Minute).Format(http1123), 2 * time.Minute},
		{now.Add(48 * time.Hour).Format(http1123), time.Hour},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
