package execute

import (
	"strconv"
	"time"

	"github.com/chronoscron/chronos/agent/job"
)

// Environment variables of runs (see RunEnv).
const (
	EnvRunHome          = "CHRONOS_HOME"
	EnvChainID          = "CHRONOS_CHAIN_ID"
	EnvChainClass       = "CHRONOS_CHAIN_CLASS"
	EnvChainStage       = "CHRONOS_CHAIN_STAGE"
	EnvChainDepth       = "CHRONOS_CHAIN_DEPTH"
	EnvChainAttempt     = "CHRONOS_CHAIN_ATTEMPT"
	EnvChainExpiresAt   = "CHRONOS_CHAIN_EXPIRES_AT"
	EnvChainStep        = "CHRONOS_CHAIN_STEP"
	EnvChainMaxDepth    = "CHRONOS_CHAIN_MAX_DEPTH"
	EnvChainMaxChildren = "CHRONOS_CHAIN_MAX_CHILDREN"
	// EnvParentRunID is the variable a fanout child and reducer find their
	// parent's run id in.
	EnvParentRunID = "CHRONOS_PARENT_RUN_ID"
)

// RunEnv returns the variables a run of j gets besides its payload's:
// CHRONOS_HOME (the agent's home, so `chronos chain ...` inside the run
// finds the store) and, for a chain step, its chain metadata.
func RunEnv(home string, j *job.Job) map[string]string {
	env := map[string]string{EnvRunHome: home}
	if m := j.Chain; m != nil {
		env[EnvChainID] = m.ChainID
		env[EnvChainClass] = m.ChainClass
		env[EnvChainStage] = m.Stage
		env[EnvChainDepth] = strconv.Itoa(m.Depth)
		env[EnvChainAttempt] = strconv.Itoa(m.Attempt)
		env[EnvChainExpiresAt] = m.ExpiresAt.UTC().Format(time.RFC3339)
		env[EnvChainMaxDepth] = strconv.Itoa(m.MaxDepth)
		env[EnvChainMaxChildren] = strconv.Itoa(m.MaxChildren)
		env[EnvChainStep] = j.ID
	}
	return env
}
