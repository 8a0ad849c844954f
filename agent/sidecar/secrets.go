package sidecar

import (
	"path/filepath"
	"strings"

	"github.com/chronoscron/chronos/agent/localapi"
	agentnotify "github.com/chronoscron/chronos/agent/notify"
	"github.com/chronoscron/chronos/agent/provider"
	"github.com/chronoscron/chronos/internal/secretfile"
)

// SecretFiles returns the files holding secrets that the agent of cfg
// reads: cron.chronos.access_token_file when it is set, the local API's
// admin token (ui_token_file, else <home>/ui-token) and the webhook signing
// secret (<home>/notify/webhook-secret). The agent writes the last two
// itself, with mode 0600 in directories of mode 0700.
func SecretFiles(cfg provider.Config) []string {
	var files []string
	if f := strings.TrimSpace(cfg.Cron.Chronos.AccessTokenFile); f != "" {
		files = append(files, f)
	}
	return append(files,
		localapi.TokenPath(cfg.Home, cfg.UITokenFile),
		filepath.Join(agentnotify.HomeDir(cfg.Home), agentnotify.SecretFile))
}

// ExposedSecretFiles returns the secret files of cfg (see SecretFiles) that
// their group or others may read, each checked on the open file. A file
// that does not exist yet, or cannot be opened, is left out: reading it is
// where that is reported.
func ExposedSecretFiles(cfg provider.Config) []secretfile.Exposure {
	var exposed []secretfile.Exposure
	for _, f := range SecretFiles(cfg) {
		if e, err := secretfile.Inspect(f); err == nil && e != nil {
			exposed = append(exposed, *e)
		}
	}
	return exposed
}
