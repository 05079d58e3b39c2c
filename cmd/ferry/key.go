package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
)

// passwordEnv is where cosign, and so ferry, reads a key's password from.
const passwordEnv = "COSIGN_PASSWORD"

// readPassword returns COSIGN_PASSWORD when it is set (even empty, as
// cosign allows), else asks on the terminal; confirm asks twice. Without a
// terminal and without the variable it is an error, never a silent default.
func readPassword(cmd *cobra.Command, prompt string, confirm bool) ([]byte, error) {
	if v, ok := os.LookupEnv(passwordEnv); ok {
		return []byte(v), nil
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil || !term.IsTerminal(int(tty.Fd())) {
		if tty != nil {
			tty.Close()
		}
		return nil, fmt.Errorf("no terminal to ask for the key password: set %s", passwordEnv)
	}
	defer tty.Close()
	ask := func(p string) ([]byte, error) {
		fmt.Fprint(tty, p)
		pw, err := term.ReadPassword(int(tty.Fd()))
		fmt.Fprintln(tty)
		return pw, err
	}
	pw, err := ask(prompt)
	if err != nil {
		return nil, err
	}
	if confirm {
		again, err := ask("Enter password for private key again: ")
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(pw, again) {
			return nil, errors.New("passwords do not match")
		}
	}
	return pw, nil
}

// loadSignKey reads a private key, asking for its password as needed.
func loadSignKey(cmd *cobra.Command, path string) (*key.Private, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %v", artifact.ErrKey, err)
	}
	pw, err := readPassword(cmd, "Enter password for private key: ", false)
	if err != nil {
		return nil, err
	}
	return key.LoadPrivate(path, pw)
}

// loadVerifyKeys reads the public keys given with --key.
func loadVerifyKeys(paths []string) ([]artifact.Verifier, error) {
	var keys []artifact.Verifier
	for _, p := range paths {
		k, err := artifact.LoadPublicKey(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func newKeyCmd() *cobra.Command {
	cmd := groupCmd(&cobra.Command{Use: "key", Short: "Manage signing keys (cosign-compatible)"})
	cmd.AddCommand(newKeyGenerateCmd())
	return cmd
}

func newKeyGenerateCmd() *cobra.Command {
	var (
		prefix string
		force  bool
		output outputFlag
	)
	cmd := &cobra.Command{
		Use:   "generate [DIR]",
		Short: "Generate a cosign key pair: cosign.key and cosign.pub",
		Long: `Generate an ECDSA P-256 key pair in DIR (default: the current folder) as
` + "`cosign generate-key-pair`" + ` does: cosign.key, encrypted with a password from
COSIGN_PASSWORD or asked on the terminal, and cosign.pub. Keys made by either
tool work in both. Existing files are not overwritten without --force.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			priv, pub := filepath.Join(dir, prefix+".key"), filepath.Join(dir, prefix+".pub")
			if !force {
				for _, p := range []string{priv, pub} {
					if _, err := os.Stat(p); err == nil {
						return fmt.Errorf("%s exists (use --force to overwrite)", p)
					}
				}
			}
			pw, err := readPassword(cmd, "Enter password for private key: ", true)
			if err != nil {
				return err
			}
			kp, err := key.Generate(pw)
			if err != nil {
				return err
			}
			if err := kp.WriteFiles(priv, pub); err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), map[string]string{"privateKey": priv, "publicKey": pub})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Private key written to %s\nPublic key written to %s\n", priv, pub)
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "cosign", "file name prefix of the key pair")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing key files")
	output.register(cmd)
	return cmd
}
