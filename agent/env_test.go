package agent

import (
	"testing"
	"time"

	"github.com/chronoscron/chronos/agent/chain"
	"github.com/chronoscron/chronos/agent/job"
)

// TestRunEnv checks the variables an embedder's runner gets for a run: the
// agent's home for any job, and a chain step's metadata for a step.
func TestRunEnv(t *testing.T) {
	exp := time.Date(2026, 6, 1, 9, 0, 0, 0, time.FixedZone("x", 3600))
	tests := []struct {
		name string
		job  job.Job
		want map[string]string
	}{
		{"plain job", job.Job{ID: "j"}, map[string]string{EnvRunHome: "/h"}},
		{"chain step", job.Job{ID: "step-2", Chain: &chain.Meta{ChainID: "c1", ChainClass: "deploy", Stage: "build",
			Depth: 2, Attempt: 1, ExpiresAt: exp, MaxDepth: 5, MaxChildren: 3}},
			map[string]string{EnvRunHome: "/h", EnvChainID: "c1", EnvChainClass: "deploy", EnvChainStage: "build",
				EnvChainDepth: "2", EnvChainAttempt: "1", EnvChainExpiresAt: "2026-06-01T08:00:00Z",
				EnvChainMaxDepth: "5", EnvChainMaxChildren: "3", EnvChainStep: "step-2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RunEnv("/h", &tt.job)
			if len(got) != len(tt.want) {
				t.Fatalf("RunEnv = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
