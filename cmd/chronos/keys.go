package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/cmd/chronos/internal/cmdline"
	"github.com/chronoscron/chronos/internal/termtext"
	"github.com/chronoscron/chronos/nas"
)

// keyActivated is what keys activate --json prints.
type keyActivated struct {
	KID     string `json:"kid"`
	Signing bool   `json:"signing"`
}

func newKeysCmd() *cobra.Command {
	return groupCmd("keys", "Manage NAS signing keys", newKeysGenerateCmd(), newKeysListCmd(), newKeysActivateCmd())
}

func newKeysGenerateCmd() *cobra.Command {
	var dir, alg string
	var activate bool
	var out cmdline.Output
	c := out.Register(&cobra.Command{
		Use:   "generate --out DIR [--alg ES256|EdDSA|RS256]",
		Short: "Write a new signing key (PEM, mode 0600) named <kid>.pem and print its kid",
		Long: `Write a new private signing key to DIR/<kid>.pem and print its kid. DIR is
created with mode 0700 if missing; an existing DIR that group or others may
write is refused, as NAS refuses it.

A new key in the signing keys dir is published in the JWKS at once (NAS
re-reads the dir on SIGHUP and every key_check_interval) but does not sign
until it is named in DIR/active (see "chronos keys activate"), so agents can
fetch it before the first token signed with it arrives.

--alg defaults to ES256, NAS's default signing_alg: agents verify fire tokens
with their own JWT library, and common verifiers (PyJWT-based agents among
them) accept only RS and ES algorithms. Choose EdDSA only for agents known to
accept it; RS256 for verifiers that want RSA.`,
		Example: "  chronos keys generate --out /etc/chronos/keys\n  chronos keys generate --out /etc/chronos/keys --json | jq -r .kid",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("keys generate: --out is required")
			}
			switch alg {
			case nas.AlgES256, nas.AlgEdDSA, nas.AlgRS256:
			default:
				return usagef("keys generate: --alg %q is not ES256, EdDSA or RS256", alg)
			}
			k, err := nas.GenerateKey(alg)
			if err != nil {
				return err
			}
			if err := nas.WriteKeyFile(dir, k); err != nil {
				return fmt.Errorf("keys generate: %w", err)
			}
			state := "published"
			if activate {
				if err := nas.ActivateKey(dir, k.KID); err != nil {
					return fmt.Errorf("keys activate: %w", err)
				}
				state = "signing"
			}
			return out.Print(cmd.OutOrStdout(), nas.KeyInfo{KID: k.KID, Alg: k.Alg, State: state}, cmdline.Textf("%s", k.KID))
		},
	}, "the new key")
	c.Flags().StringVar(&dir, "out", "", "the signing keys directory")
	c.Flags().StringVar(&alg, "alg", nas.DefaultSigningAlg, "ES256, EdDSA or RS256")
	c.Flags().BoolVar(&activate, "activate", false, "also make the new key the signing key (only for a first key)")
	return c
}

func newKeysListCmd() *cobra.Command {
	var dir string
	var out cmdline.Output
	c := out.Register(&cobra.Command{
		Use:   "list --dir DIR",
		Short: "List the keys of a signing keys dir and which one signs",
		Long: `List the keys of a signing keys dir with their algorithm, and which one
signs: the key the active file names, else, as NAS does with no signing_alg
set, the oldest ES256 key, else the oldest EdDSA key, else the oldest RS256 key.
A key file that group or others may read is listed, with a warning on stderr
naming the fix (chmod 600 FILE), as NAS warns when it loads it.`,
		Example: "  chronos keys list --dir /etc/chronos/keys --json | jq -r '.[] | select(.state==\"signing\") | .kid'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("keys list: --dir is required")
			}
			set, err := nas.LoadKeyDir(dir, "")
			if err != nil {
				return err
			}
			for _, e := range set.Exposed {
				fmt.Fprintln(cmd.ErrOrStderr(), termtext.Args([]any{"warning: " + e.String()})...)
			}
			keys := set.Keys()
			return out.Print(cmd.OutOrStdout(), keys, func(w io.Writer) error { return nas.WriteKeyTable(w, keys) })
		},
	}, "the keys")
	c.Flags().StringVar(&dir, "dir", "", "the signing keys directory")
	return c
}

func newKeysActivateCmd() *cobra.Command {
	var dir string
	var out cmdline.Output
	c := out.Register(&cobra.Command{
		Use:   "activate --dir DIR KID",
		Short: "Make KID the signing key (publish it first and wait for JWKS caches)",
		Long: `Name KID in DIR/active: NAS signs with it from its next key check (SIGHUP or
key_check_interval). Generate the key first and wait until agents' JWKS
caches hold it, so no token arrives signed with a key they have not seen.`,
		Example: "  chronos keys activate --dir /etc/chronos/keys 2026-06-01-ab12",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usagef("keys activate: --dir is required")
			}
			kid := args[0]
			if _, err := os.Stat(filepath.Join(dir, kid+".pem")); err != nil {
				return usagef("keys activate: no key %s in %s", kid, dir)
			}
			if err := nas.ActivateKey(dir, kid); err != nil {
				return fmt.Errorf("keys activate: %w", err)
			}
			return out.Print(cmd.OutOrStdout(), keyActivated{KID: kid, Signing: true},
				cmdline.Textf("%s now signs; send NAS SIGHUP or wait for its next key check", kid))
		},
	}, "the result")
	c.Flags().StringVar(&dir, "dir", "", "the signing keys directory")
	return c
}
