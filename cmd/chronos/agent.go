package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/provider"
)

// Environment variables the agent commands read besides the config keys.
const (
	// envAgentConfig names the agent config file when --config is not given;
	// the jobs CLI reads it too, to arm its changes at NAS.
	envAgentConfig = provider.EnvConfigFile
)

func newAgentCmd() *cobra.Command {
	return groupCmd("agent", "Run and inspect the agent sidecar; cancel an agent's fires at NAS",
		newAgentServeCmd(),
		newAgentStatusCmd(),
		newAgentCancelAllCmd(),
	)
}

// loadAgentConfig reads the agent config (provider.LoadConfig); bad input
// is a usage error.
func loadAgentConfig(path string, lookup func(string) (string, bool)) (provider.Config, provider.Decision, error) {
	cfg, d, err := provider.LoadConfig(path, lookup)
	return cfg, d, asUsage(err)
}

// agentLogger returns a JSON logger at level (debug, info, warn, error),
// read as NAS reads its log_level.
func agentLogger(w io.Writer, level string) (*slog.Logger, error) {
	l, err := parseLogLevel("agent: --log-level", level)
	if err != nil {
		return nil, err
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: durationText})), nil
}

// configFlag registers --config on c.
func configFlag(c *cobra.Command, p *string) {
	c.Flags().StringVar(p, "config", "", fmt.Sprintf("agent config file (YAML; default $%s; every key also from CHRONOS_<KEY>)", envAgentConfig))
}
