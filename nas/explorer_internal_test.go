package nas

import (
	"testing"

	"github.com/chronoscron/chronos/contract"
	"github.com/chronoscron/chronos/relay"
)

func TestLagQuantile(t *testing.T) {
	t.Parallel()
	buckets := func(counts map[int]int64) []int64 {
		b := make([]int64, len(relay.HistoryLagBounds)+1)
		for i, n := range counts {
			b[i] = n
		}
		return b
	}
	tests := []struct {
		name     string
		buckets  []int64
		q        float64
		lo, hi   float64
		wantNone bool
	}{
		{name: "nothing delivered", buckets: buckets(nil), q: 0.5, wantNone: true},
		{name: "no buckets", buckets: nil, q: 0.5, wantNone: true},
		{name: "all in the first bucket", buckets: buckets(map[int]int64{0: 10}), q: 0.5, lo: 0, hi: 0.01},
		{name: "median in the second", buckets: buckets(map[int]int64{1: 10}), q: 0.5, lo: 0.01, hi: 0.025},
		{name: "p99 in the slow tail", buckets: buckets(map[int]int64{1: 90, 9: 10}), q: 0.99, lo: 5, hi: 10},
		{name: "past the last bound", buckets: buckets(map[int]int64{len(relay.HistoryLagBounds): 3}), q: 0.5, lo: 300, hi: 300},
	}
	for _, tt := range tests {
		got := lagQuantile(tt.buckets, tt.q)
		switch {
		case tt.wantNone && got != nil:
			t.Errorf("%s: %v, want none", tt.name, *got)
		case !tt.wantNone && (got == nil || *got < tt.lo || *got > tt.hi):
			t.Errorf("%s: %v, want within [%v, %v]", tt.name, got, tt.lo, tt.hi)
		}
	}
}

func TestFlowWord(t *testing.T) {
	t.Parallel()
	at := contract.Time{}
	tests := []struct {
		flow contract.AgentFlowState
		want string
	}{
		{contract.AgentFlowState{}, "delivering"},
		{contract.AgentFlowState{Held: 2}, "limited"},
		{contract.AgentFlowState{Held: 2, GateUntil: &at}, "waiting"},
		{contract.AgentFlowState{Probing: true, GateUntil: &at}, "probing"},
		{contract.AgentFlowState{Disabled: true, Probing: true}, "disabled"},
	}
	for _, tt := range tests {
		if got := flowWord(tt.flow); got != tt.want {
			t.Errorf("flowWord(%+v) = %q, want %q", tt.flow, got, tt.want)
		}
	}
}

func TestOffsetCursor(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"-1", "x", "01", "1.5", " 2"} {
		if _, err := offsetCursor(c); err == nil {
			t.Errorf("offsetCursor(%q): no error", c)
		}
	}
	for c, want := range map[string]int{"": 0, "0": 0, "25": 25} {
		if got, err := offsetCursor(c); err != nil || got != want {
			t.Errorf("offsetCursor(%q) = %d, %v; want %d", c, got, err, want)
		}
	}
}
