package main

import "github.com/chronoscron/chronos/nas"

// nasEnvPrefix prefixes every NAS setting in the environment.
const nasEnvPrefix = nas.EnvPrefix

// checkNASEnv reports every CHRONOS_NAS_ variable of environ that names no
// config key.
func checkNASEnv(environ []string) error { return nas.CheckEnv(environ) }

// loadNASConfig reads NAS's config: the file at path ("" reads none), the
// environment, and the *_file secrets.
func loadNASConfig(path string, getenv func(string) (string, bool)) (nas.Config, error) {
	return nas.LoadConfig(path, getenv)
}

// printNASConfig is what --print-config prints: cfg as YAML, secrets
// redacted, each key commented with its variable.
func printNASConfig(cfg nas.Config) ([]byte, error) { return cfg.RedactedYAML() }
