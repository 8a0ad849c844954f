package clockskew

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

func TestObserveDate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		shift          time.Duration // local − NAS
		rtt            time.Duration
		wantLo, wantHi time.Duration
	}{
		{"in step", 0, 20 * time.Millisecond, 0, 0},
		{"behind 2m", -2 * time.Minute, 20 * time.Millisecond, 2*time.Minute - time.Second, 2*time.Minute + time.Second},
		{"ahead 2m", 2 * time.Minute, 20 * time.Millisecond, -2*time.Minute - time.Second, -2*time.Minute + time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nas := t0.Add(300 * time.Millisecond) // NAS's clock when it answers
			local := nas.Add(tc.shift)
			e := New(Options{Local: func() time.Time { return local }, Logger: slog.New(slog.DiscardHandler)})
			e.ObserveDate(local.Add(-tc.rtt/2), local.Add(tc.rtt/2), nas.Truncate(time.Second))
			if got := e.Offset(); got < tc.wantLo || got > tc.wantHi {
				t.Fatalf("offset %s, want in [%s, %s]", got, tc.wantLo, tc.wantHi)
			}
			if !e.Known() {
				t.Fatal("not known after a Date")
			}
			if d := e.Now().Sub(nas); d < -time.Second || d > time.Second {
				t.Fatalf("Now is %s off NAS's clock", d)
			}
		})
	}
}

func TestObserveIssuedOnlyRaises(t *testing.T) {
	t.Parallel()
	local := t0
	e := New(Options{Local: func() time.Time { return local }, Logger: slog.New(slog.DiscardHandler)})
	e.ObserveIssued(t0.Add(-time.Hour)) // a replayed old token
	if e.Offset() != 0 {
		t.Fatalf("an old iat moved the offset to %s", e.Offset())
	}
	e.ObserveIssued(t0.Add(2 * time.Minute))
	if e.Offset() != 2*time.Minute {
		t.Fatalf("offset %s after an iat 2m ahead", e.Offset())
	}
	// A Date that says the host is only 1m behind pulls it back.
	e.ObserveDate(t0, t0, t0.Add(time.Minute))
	if e.Offset() != time.Minute+time.Second {
		t.Fatalf("offset %s after a Date 1m ahead", e.Offset())
	}
}

func TestWarnsOnce(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	local := t0
	e := New(Options{Local: func() time.Time { return local }, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	e.ObserveDate(t0, t0, t0) // in step: no warning
	if strings.Contains(buf.String(), "WARN") {
		t.Fatalf("warned in step: %s", buf.String())
	}
	for range 3 {
		e.ObserveDate(t0, t0, t0.Add(-2*time.Minute))
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "ahead of NAS") {
		t.Fatalf("warning does not say which way: %s", buf.String())
	}
}

func TestObserveDateIgnoresNonsense(t *testing.T) {
	t.Parallel()
	e := New(Options{Local: func() time.Time { return t0 }})
	e.ObserveDate(t0, t0, time.Time{})
	e.ObserveDate(t0, t0.Add(-time.Second), t0.Add(time.Hour))
	if e.Known() || e.Offset() != 0 {
		t.Fatalf("known %v, offset %s after unusable evidence", e.Known(), e.Offset())
	}
}
