package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// EnvConfigFile names the agent config file when no path is given; the jobs
// commands read it too, to arm their changes at NAS.
const EnvConfigFile = "CHRONOS_AGENT_CONFIG"

// LoadConfig reads the agent config: the file at path (or at
// $CHRONOS_AGENT_CONFIG; none is fine), then the environment through lookup
// (CHRONOS_<KEY>), then the defaults (ui_listen 127.0.0.1:8788 unless the file or the
// environment sets it, even to empty; home ~/.chronos, listen
// 127.0.0.1:8787), then the access token file. A relative path in the file
// (home, cron.chronos.access_token_file) is relative to the file's
// directory, whatever the working directory; one from the environment, to
// the working directory. An error is bad input; a chronos provider that
// cannot be used is not an error but a Decision for the built-in timer, with
// its reasons.
func LoadConfig(path string, lookup func(string) (string, bool)) (Config, Decision, error) {
	if path == "" {
		path, _ = lookup(EnvConfigFile)
	}
	var cfg Config
	uiListenSet := false // ui_listen: "" disables, a missing key is the default
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, Decision{}, fmt.Errorf("agent: config: %w", err)
		}
		if cfg, err = ParseConfig(data); err != nil {
			return cfg, Decision{}, fmt.Errorf("agent: %s: %w", path, err)
		}
		uiListenSet = keySet(data, "ui_listen")
		cfg.resolvePaths(filepath.Dir(path))
	}
	if err := cfg.ApplyEnv(lookup); err != nil {
		return cfg, Decision{}, fmt.Errorf("agent: %w", err)
	}
	if _, set := lookup(EnvPrefix + "UI_LISTEN"); !set && !uiListenSet {
		cfg.UIListen = DefaultUIListen
	}
	if cfg.Home == "" {
		dir, err := os.UserHomeDir()
		if err != nil {
			return cfg, Decision{}, fmt.Errorf("agent: home: not set and no user home directory: %w", err)
		}
		cfg.Home = filepath.Join(dir, ".chronos")
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	cfg.Cron.Chronos.readAccessToken()
	if err := cfg.Validate(); err != nil {
		return cfg, Decision{}, err
	}
	return cfg, Decide(cfg), nil
}

// resolvePaths makes the relative paths of a config file relative to the
// file's directory dir.
func (c *Config) resolvePaths(dir string) {
	for _, p := range []*string{&c.Home, &c.Cron.Chronos.AccessTokenFile, &c.UITokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// readAccessToken reads AccessTokenFile unless the token came from the
// environment; a failure is kept in AccessTokenErr for Decide to report.
func (c *ChronosConfig) readAccessToken() {
	if c.AccessToken != "" || c.AccessTokenFile == "" {
		return
	}
	data, err := os.ReadFile(c.AccessTokenFile)
	if err != nil {
		c.AccessTokenErr = err
		return
	}
	c.AccessToken = strings.TrimSpace(string(data))
}

// keySet reports whether the top-level key is present in the YAML data
// (which parsed), whatever its value.
func keySet(data []byte, key string) bool {
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(data, &top); err != nil {
		return false
	}
	_, ok := top[key]
	return ok
}
