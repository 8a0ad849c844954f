package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/nas/operator"
)

// Environment variables the agent commands read besides the config keys.
const (
	// envAgentConfig names the agent config file when --config is not given;
	// the jobs CLI reads it too, to arm its changes at NAS.
	envAgentConfig = provider.EnvConfigFile
)

func newAgentCmd() *cobra.Command {
	return groupCmd("agent", "Run and inspect the agent sidecar; cancel, disable, enable or re-key an agent's fires at NAS",
		newAgentServeCmd(),
		newAgentStatusCmd(),
		newAgentCancelAllCmd(),
		newAgentStateCmd("disable", "Disable an agent at NAS: its fires are held and its calls refused until it is enabled",
			(*operator.Client).DisableAgent),
		newAgentStateCmd("enable", "Enable a disabled agent at NAS: its held fires go out",
			(*operator.Client).EnableAgent),
		newAgentRekeyCmd(),
	)
}

// loadAgentConfig reads the agent config (provider.LoadConfig); bad input
// is a usage error.
func loadAgentConfig(path string, lookup func(string) (string, bool)) (provider.Config, provider.Decision, error) {
	cfg, d, err := provider.LoadConfig(path, lookup)
	return cfg, d, asUsage(err)
}

// configFlag registers --config on c.
func configFlag(c *cobra.Command, p *string) {
	c.Flags().StringVar(p, "config", "", fmt.Sprintf("agent config file (YAML; default $%s; every key also from CHRONOS_<KEY>)", envAgentConfig))
}
