package main

import (
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// versionInfo is what chronos version prints.
type versionInfo struct {
	Version string `json:"version"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Go      string `json:"go"`
}

func newVersionCmd() *cobra.Command {
	var out cmdline.Output
	return out.Register(&cobra.Command{
		Use: "version", Short: "Print the version of chronos", Args: cobra.NoArgs,
		Example: "  chronos version\n  chronos version --json | jq -r .version",
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo{Version: version, OS: runtime.GOOS, Arch: runtime.GOARCH, Go: runtime.Version()}
			if info, ok := debug.ReadBuildInfo(); ok && v.Version == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
				v.Version = info.Main.Version
			}
			return out.Print(cmd.OutOrStdout(), v, cmdline.Textf("chronos %s %s/%s %s", v.Version, v.OS, v.Arch, v.Go))
		},
	}, "the version")
}
