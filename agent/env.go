package agent

import (
	"github.com/chronoscron/chronos/agent/internal/execute"
	"github.com/chronoscron/chronos/agent/job"
)

// Environment variables of runs (see RunEnv).
const (
	EnvRunHome          = execute.EnvRunHome
	EnvChainID          = execute.EnvChainID
	EnvChainClass       = execute.EnvChainClass
	EnvChainStage       = execute.EnvChainStage
	EnvChainDepth       = execute.EnvChainDepth
	EnvChainAttempt     = execute.EnvChainAttempt
	EnvChainExpiresAt   = execute.EnvChainExpiresAt
	EnvChainStep        = execute.EnvChainStep
	EnvChainMaxDepth    = execute.EnvChainMaxDepth
	EnvChainMaxChildren = execute.EnvChainMaxChildren
	// EnvParentRunID is the variable a fanout child and reducer find their
	// parent's run id in.
	EnvParentRunID = execute.EnvParentRunID
)

// StopGrace is how long a stopped fanout child has between SIGTERM and
// SIGKILL.
const StopGrace = execute.StopGrace

// RunEnv returns the variables a run of j gets besides its payload's:
// CHRONOS_HOME (the agent's home, so `chronos chain ...` inside the run
// finds the store) and, for a chain step, its chain metadata.
func RunEnv(home string, j *job.Job) map[string]string { return execute.RunEnv(home, j) }
