package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/confine"
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
		return nil, fmt.Errorf("%w: %v", artifact.ErrKey, confine.Wrap(path, err))
	}
	pw, err := readPassword(cmd, "Enter password for private key: ", false)
	if err != nil {
		return nil, err
	}
	return key.LoadPrivate(path, pw)
}

func newKeyCmd() *cobra.Command {
	cmd := cli.GroupCmd(&cobra.Command{
		Use:   "key",
		Short: "Manage signing keys (cosign-compatible)",
		Example: `  ferry key generate
  ferry key generate keys --prefix release`,
	})
	cmd.AddCommand(newKeyGenerateCmd())
	return cmd
}

func newKeyGenerateCmd() *cobra.Command {
	var (
		prefix string
		force  bool
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "generate [DIR]",
		Short: "Generate a cosign key pair: cosign.key and cosign.pub",
		Example: `  # cosign.key and cosign.pub in the current folder (asks for a password)
  ferry key generate

  # release.key and release.pub in ./keys
  ferry key generate keys --prefix release`,
		Long: `Generate an ECDSA P-256 key pair in DIR (default: the current folder) as
` + "`cosign generate-key-pair`" + ` does: cosign.key, encrypted with a password from
COSIGN_PASSWORD or asked on the terminal, and cosign.pub. Keys made by either
tool work in both. Existing files are not overwritten without --force.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				return fmt.Errorf("key generate: %s is not a folder (make it first)", dir)
			}
			if prefix == "" || strings.ContainsAny(prefix, `/\`) || prefix == "." || prefix == ".." {
				return fmt.Errorf("--prefix %q is not a file name (the folder is the argument: key generate DIR)", prefix)
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
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]string{"privateKey": priv, "publicKey": pub})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Private key written to %s\nPublic key written to %s\n", priv, pub)
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "cosign", "file name prefix of the key pair")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing key files")
	output.Register(cmd)
	return cmd
}

func newSignCmd() *cobra.Command {
	var (
		key    string
		remote cli.RemoteFlags
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "sign PKG|REF --key cosign.key",
		Short: "Sign a package's root digest with a cosign key",
		Example: `  ferry package sign app.tar.zst --key cosign.key

  # Sign a package already in a registry (the signature is pushed beside it)
  ferry package sign registry.example.com/apps/app:1.0.0 --key cosign.key`,
		Long: `Sign the package root digest with a cosign private key (password from
COSIGN_PASSWORD or the terminal). The signature is stored the way cosign
stores it — a signature manifest tagged sha256-<hex>.sig — in the archive or
layout folder (push carries it) or, for a registry reference, in the
registry, where ` + "`cosign verify`" + ` finds it. The root digest never changes;
signing with another key adds a signature, the same key again changes nothing.

No transparency log or network is used (air gap): trust rests on the public
key alone, and nothing records when or whether a signature was made.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if key == "" {
				return fmt.Errorf("--key is required")
			}
			src, ref, err := cli.OpenSource(cmd, args[0], remote)
			if err != nil {
				return err
			}
			k, err := loadSignKey(cmd, key)
			if err != nil {
				return err
			}
			progress, done := cli.NewProgress(cmd)
			res, err := artifact.Sign(cmd.Context(), src, ref, k, artifact.SignOptions{Progress: progress})
			done()
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			if !res.Added {
				fmt.Fprintf(cmd.OutOrStdout(), "%s already signed by %s (%d signature(s)); nothing changed\n", res.Root, key, res.Signatures)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s with %s (%d signature(s))\nsignature %s\n", res.Root, key, res.Signatures, res.Signature.Digest)
			return nil
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "cosign private key file")
	remote.Register(cmd)
	output.Register(cmd)
	return cmd
}
