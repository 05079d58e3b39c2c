package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
)

func newSignCmd() *cobra.Command {
	var (
		key    string
		remote remoteFlags
		output outputFlag
	)
	cmd := &cobra.Command{
		Use:   "sign PKG|REF --key cosign.key",
		Short: "Sign a package's root digest with a cosign key",
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
			if err := output.validate(); err != nil {
				return err
			}
			if key == "" {
				return fmt.Errorf("--key is required")
			}
			path, ref, err := parseSource(args[0])
			if err != nil {
				return err
			}
			k, err := loadSignKey(cmd, key)
			if err != nil {
				return err
			}
			var res *artifact.SignResult
			if path != "" {
				r, err := artifact.Open(cmd.Context(), path)
				if err != nil {
					return err
				}
				progress, done := newProgress(cmd)
				res, err = artifact.Sign(cmd.Context(), r, k, artifact.SignOptions{Progress: progress})
				done()
				if err != nil {
					return err
				}
			} else {
				ro, err := remote.options(cmd, ref)
				if err != nil {
					return err
				}
				if res, err = artifact.SignRemote(cmd.Context(), ref, k, artifact.SignOptions{Remote: ro}); err != nil {
					return err
				}
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), res)
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
	remote.register(cmd)
	output.register(cmd)
	return cmd
}

func newVerifyCmd() *cobra.Command {
	var (
		keys   []string
		remote remoteFlags
		output outputFlag
	)
	cmd := &cobra.Command{
		Use:   "verify PKG|REF --key cosign.pub",
		Short: "Verify a package's signature and every byte under its root",
		Long: `Verify, fail closed, that the package carries a valid signature over its
root digest by one of the given public keys AND that every blob reachable
from the root matches its digest (one streaming pass; for a registry
reference, the signature first, then every blob fetched and re-hashed).
Exit status 0 only when both hold.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			res, err := verifyPackage(cmd, args[0], keys, remote)
			if err != nil {
				return err
			}
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), newVerifyJSON(res))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verified %s %s\nroot %s: %d blobs, %s, every digest checked\n",
				res.Report.Name, res.Report.Version, res.Report.Root, res.Report.Blobs, humanBytes(res.Report.StoredSize))
			for _, s := range res.Signatures {
				fmt.Fprintf(cmd.OutOrStdout(), "signature by %s (payload %s)\n", s.Key, s.Payload)
			}
			return nil
		},
	}
	addKeyFlag(cmd, &keys)
	remote.register(cmd)
	output.register(cmd)
	return cmd
}

// addKeyFlag registers --key (repeatable) for public keys.
func addKeyFlag(cmd *cobra.Command, keys *[]string) {
	cmd.Flags().StringArrayVar(keys, "key", nil, "cosign public key file (repeatable: any one may have signed)")
}

// verifyPackage verifies a package on disk or in a registry with keys.
func verifyPackage(cmd *cobra.Command, src string, keyFiles []string, remote remoteFlags) (*artifact.VerifyResult, error) {
	if len(keyFiles) == 0 {
		return nil, fmt.Errorf("--key is required")
	}
	keys, err := loadVerifyKeys(keyFiles)
	if err != nil {
		return nil, err
	}
	path, ref, err := parseSource(src)
	if err != nil {
		return nil, err
	}
	ro, err := remote.options(cmd, ref)
	if err != nil {
		return nil, err
	}
	progress, done := newProgress(cmd)
	defer done()
	opts := artifact.VerifyOptions{Keys: keys, Remote: ro, Progress: progress}
	if path == "" {
		return artifact.VerifyRemote(cmd.Context(), ref, opts)
	}
	r, err := artifact.Open(cmd.Context(), path)
	if err != nil {
		return nil, err
	}
	return artifact.Verify(cmd.Context(), r, opts)
}
