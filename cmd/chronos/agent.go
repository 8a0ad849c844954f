package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/agent/provider"
)

// Environment variables the agent commands read besides the config keys.
const (
	// envAgentConfig names the agent config file when --config is not given;
	// the jobs CLI reads it too, to arm its changes at NAS.
	envAgentConfig = "CHRONOS_AGENT_CONFIG"
)

func newAgentCmd() *cobra.Command {
	return groupCmd("agent", "Run and inspect the agent sidecar",
		newAgentServeCmd(),
		newAgentStatusCmd(),
	)
}

// loadAgentConfig reads the agent config: the file at path (or at
// $CHRONOS_AGENT_CONFIG; none is fine), then the environment, then the
// defaults (home ~/.chronos, listen 127.0.0.1:8787), then the access token
// file. Bad input is a usage error; a chronos provider that cannot be used is
// not an error but a Decision for the built-in timer, with its reasons.
func loadAgentConfig(path string, lookup func(string) (string, bool)) (provider.Config, provider.Decision, error) {
	if path == "" {
		path, _ = lookup(envAgentConfig)
	}
	var cfg provider.Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, provider.Decision{}, usagef("agent: config: %v", err)
		}
		if cfg, err = provider.ParseConfig(data); err != nil {
			return cfg, provider.Decision{}, usagef("agent: %s: %v", path, err)
		}
	}
	cfg.ApplyEnv(lookup)
	if cfg.Home == "" {
		dir, err := os.UserHomeDir()
		if err != nil {
			return cfg, provider.Decision{}, usagef("agent: home: not set and no user home directory: %v", err)
		}
		cfg.Home = filepath.Join(dir, ".chronos")
	}
	if cfg.Listen == "" {
		cfg.Listen = provider.DefaultListen
	}
	ch := &cfg.Cron.Chronos
	if ch.AccessToken == "" && ch.AccessTokenFile != "" {
		file := ch.AccessTokenFile
		if !filepath.IsAbs(file) && path != "" {
			file = filepath.Join(filepath.Dir(path), file)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			ch.AccessTokenErr = err
		} else {
			ch.AccessToken = strings.TrimSpace(string(data))
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, provider.Decision{}, asUsage(err)
	}
	return cfg, provider.Decide(cfg), nil
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
