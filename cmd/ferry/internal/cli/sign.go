package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
)

func newVerifyCmd() *cobra.Command {
	var (
		keys   []string
		images bool
		remote RemoteFlags
		output OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "verify PKG|REF --key cosign.pub [--images]",
		Short: "Verify a package's signature and every byte under its root",
		Example: `  ferry package verify app.tar.zst --key cosign.pub

  # A package in a registry that either of two keys may have signed
  ferry package verify registry.example.com/apps/app:1.0.0 --key cosign.pub --key release.pub

  # Also the images' own signatures, against the policies the definition named
  ferry package verify app.tar.zst --key cosign.pub --images`,
		Long: `Verify, fail closed, that the package carries a valid signature over its
root digest by one of the given public keys AND that every blob reachable
from the root matches its digest (one streaming pass; for a registry
reference, the signature first, then every blob fetched and re-hashed).
With --images, also every image that names a verification policy
(imagePolicies and verify: in the definition) against its publisher's
signatures and attestations the package carries, offline, as create
checked them. Exit status 0 only when all hold.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			res, err := verifyPackage(cmd, args[0], keys, remote, images)
			if err != nil {
				return err
			}
			if output.JSON() {
				return WriteJSON(cmd.OutOrStdout(), newVerifyJSON(res))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verified %s %s\nroot %s: %d blobs, %s, every digest checked\n",
				res.Report.Name, res.Report.Version, res.Report.Root, res.Report.Blobs, HumanBytes(res.Report.StoredSize))
			if d := res.Report.Delta; d != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "a delta: %s (%s) left out must come from the registry it is pushed to, where push, deploy and registry load check them\n",
					plural(len(d.Omitted), "blob"), HumanBytes(d.OmittedSize()))
			}
			for _, s := range res.Signatures {
				fmt.Fprintf(cmd.OutOrStdout(), "signature by %s (payload %s)\n", s.Key, s.Payload)
			}
			for _, i := range res.Images {
				fmt.Fprintf(cmd.OutOrStdout(), "image %s satisfies policy %s%s\n", i.Ref, i.Policy, imageResult(i))
			}
			if images && len(res.Images) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no image names a verification policy")
			}
			return nil
		},
	}
	AddKeyFlag(cmd, &keys)
	cmd.Flags().BoolVar(&images, "images", false, "also check the images' own signatures against the package's image policies, offline")
	remote.Register(cmd)
	output.Register(cmd)
	return cmd
}

// imageResult says whose signatures and which attestations an image's
// verification found.
func imageResult(i artifact.VerifiedImage) string {
	if i.Result == nil || len(i.Result.Signers) == 0 {
		return " (not signed; the policy does not require it)"
	}
	s := ": signed by " + strings.Join(i.Result.Signers, ", ")
	if len(i.Result.Attestations) > 0 {
		s += "; attestations " + strings.Join(i.Result.Attestations, ", ")
	}
	return s
}

// AddKeyFlag registers --key (repeatable) for public keys.
func AddKeyFlag(cmd *cobra.Command, keys *[]string) {
	cmd.Flags().StringArrayVar(keys, "key", nil, "cosign public key file (repeatable: any one may have signed)")
}

// verifyPackage verifies a package on disk or in a registry with keys.
func verifyPackage(cmd *cobra.Command, arg string, keyFiles []string, remote RemoteFlags, images bool) (*artifact.VerifyResult, error) {
	if len(keyFiles) == 0 {
		return nil, fmt.Errorf("--key is required")
	}
	keys, err := LoadVerifyKeys(keyFiles)
	if err != nil {
		return nil, err
	}
	src, ref, err := OpenSource(cmd, arg, remote)
	if err != nil {
		return nil, err
	}
	progress, done := NewProgress(cmd)
	defer done()
	return artifact.Verify(cmd.Context(), src, ref, artifact.VerifyOptions{Keys: keys, Images: images, Progress: progress})
}

// LoadVerifyKeys reads the public keys given with --key.
func LoadVerifyKeys(paths []string) ([]artifact.Verifier, error) {
	pubs, err := LoadPublicKeys(paths)
	if err != nil {
		return nil, err
	}
	return artifact.Verifiers(pubs), nil
}

// LoadPublicKeys reads the --key files.
func LoadPublicKeys(paths []string) ([]*artifact.PublicKey, error) {
	var keys []*artifact.PublicKey
	for _, p := range paths {
		k, err := artifact.LoadPublicKey(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}
