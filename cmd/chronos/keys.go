package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/chronoscron/chronos/nas"
)

func newKeysCmd() *cobra.Command {
	return groupCmd("keys", "Manage NAS signing keys", newKeysGenerateCmd(), newKeysListCmd(), newKeysActivateCmd())
}

func newKeysGenerateCmd() *cobra.Command {
	var out, alg string
	var activate bool
	c := &cobra.Command{
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
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
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
			if err := nas.WriteKeyFile(out, k); err != nil {
				return fmt.Errorf("keys generate: %w", err)
			}
			if activate {
				if err := nas.ActivateKey(out, k.KID); err != nil {
					return fmt.Errorf("keys activate: %w", err)
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), k.KID)
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "the signing keys directory")
	c.Flags().StringVar(&alg, "alg", nas.DefaultSigningAlg, "ES256, EdDSA or RS256")
	c.Flags().BoolVar(&activate, "activate", false, "also make the new key the signing key (only for a first key)")
	return c
}

func newKeysListCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "list --dir DIR",
		Short: "List the keys of a signing keys dir and which one signs",
		Long: `List the keys of a signing keys dir with their algorithm, and which one
signs: the key the active file names, else, as NAS does with no signing_alg
set, the oldest ES256 key, else the oldest EdDSA key, else the oldest RS256 key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("keys list: --dir is required")
			}
			set, err := nas.LoadKeyDir(dir, "")
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KID\tALG\tSTATE")
			for _, k := range set.Published {
				state := "published"
				if k.KID == set.Active.KID {
					state = "signing"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", k.KID, k.Alg, state)
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the signing keys directory")
	return c
}

func newKeysActivateCmd() *cobra.Command {
	var dir string
	c := &cobra.Command{
		Use:   "activate --dir DIR KID",
		Short: "Make KID the signing key (publish it first and wait for JWKS caches)",
		Args:  cobra.ExactArgs(1),
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
			fmt.Fprintf(cmd.OutOrStdout(), "%s now signs; send NAS SIGHUP or wait for its next key check\n", kid)
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the signing keys directory")
	return c
}
