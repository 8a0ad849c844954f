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
			pemBytes, err := k.MarshalPEM()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(out, 0o700); err != nil {
				return fmt.Errorf("keys generate: %w", err)
			}
			if err := nas.CheckKeyPath(out); err != nil {
				return fmt.Errorf("keys generate: %w", err)
			}
			if err := writeNewFile(filepath.Join(out, k.KID+".pem"), pemBytes); err != nil {
				return fmt.Errorf("keys generate: %w", err)
			}
			if activate {
				if err := writeActive(out, k.KID); err != nil {
					return err
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

// writeNewFile creates path with mode 0600, failing if it exists, and syncs it.
func writeNewFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeActive names kid in dir/active by temp file + rename.
func writeActive(dir, kid string) error {
	tmp := filepath.Join(dir, ".active.tmp")
	_ = os.Remove(tmp)
	if err := writeNewFile(tmp, []byte(kid+"\n")); err != nil {
		return fmt.Errorf("keys activate: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, nas.ActiveKeyFile)); err != nil {
		return fmt.Errorf("keys activate: %w", err)
	}
	return nil
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
			keys, active, err := readKeyDir(dir)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KID\tALG\tSTATE")
			for _, k := range keys {
				state := "published"
				if k.KID == active {
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

// readKeyDir loads every key of dir and the kid that signs when NAS's
// signing_alg is not set: the one the active file names, else the oldest
// ES256 key, else the oldest EdDSA key, else RS256.
func readKeyDir(dir string) ([]*nas.SigningKey, string, error) {
	set, err := nas.LoadKeyDir(dir, "")
	if err != nil {
		return nil, "", err
	}
	return set.Published, set.Active.KID, nil
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
			if err := writeActive(dir, kid); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s now signs; send NAS SIGHUP or wait for its next key check\n", kid)
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", "", "the signing keys directory")
	return c
}
