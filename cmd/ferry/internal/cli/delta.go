package cli

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/confine"
)

func newDeltaCmd() *cobra.Command {
	var (
		remote RemoteFlags
		output = OutputFlag{WritesFile: true}
		file   FileFlag
		have   string
		keys   []string
		sig    string
	)
	cmd := &cobra.Command{
		Use:   "delta NEW --have RECEIPT|OLD|REF -f FILE",
		Short: "Write only what the far side lacks: the signed root and the missing blobs",
		Example: `  # The far side made a receipt of its registry and carried it back
  ferry package delta app-2.0.0.tar.zst --have receipt.json -f app-2.0.0-update.tar.zst

  # A signed receipt, checked with the far side's public key
  ferry package delta app-2.0.0.tar.zst --have receipt.json --have-key far-side.pub -f update.tar.zst

  # Against the version the far side is known to hold
  ferry package delta app-2.0.0.tar.zst --have app-1.0.0.tar.zst -f update.tar.zst`,
		Long: `Write a delta of the package NEW (archive or layout folder) into FILE
(.tar.zst or .tar), atomically: a package archive with NEW's head and
signatures, its root, package manifest and ferry.json, and exactly the blobs
of NEW that --have does not hold; ferry-delta.json in it lists what it leaves
out. A manifest is left out only with everything under it.

--have is a receipt (` + "`ferry registry have`" + `), an older package (archive or
layout folder) or a package in a registry (host/repository:tag). A receipt
with --have-key must carry a valid detached signature by that key
(RECEIPT.sig, or --have-signature).

Push, deploy or registry load the delta into the repository that holds the
rest: before it writes anything it asks that repository for the blobs left
out (and, with package push --mount-from REPO, REPO for those it lacks;
no other repository) and refuses naming those missing, reads each back and
re-hashes it, and checks the whole signed graph; only then does it upload
what the delta carries and write the manifests and tags. Read alone,
inspect and verify check what it carries.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if file.Path == "" {
				return fmt.Errorf("-f FILE is required: the delta archive to write (.tar.zst or .tar)")
			}
			if err := file.Validate(""); err != nil {
				return err
			}
			if err := file.NotInput(args[0], have); err != nil {
				return err
			}
			if have == "" {
				return fmt.Errorf("--have is required: a receipt (ferry registry have), an older package, or a registry reference")
			}
			if len(keys) > 0 && !isReceipt(have) {
				return fmt.Errorf("--have-key checks a receipt's signature; %s is not a receipt", have)
			}
			receipt, err := loadHave(cmd, have, keys, sig, remote)
			if err != nil {
				return err
			}
			r, err := artifact.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			progress, done := NewProgress(cmd)
			res, err := artifact.Delta(cmd.Context(), r, receipt, file.Path, artifact.DeltaOptions{Progress: progress})
			done()
			if err != nil {
				return err
			}
			if output.JSON() {
				return WriteJSON(cmd.OutOrStdout(), res)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "delta of %s %s → %s (%s)\ncarries %s (%s), leaves out %s (%s) that %s holds\n%s\n",
				r.Config().Name, r.Config().Version, res.Path, HumanBytes(res.Size), plural(res.Carried, "blob"), HumanBytes(res.CarriedSize),
				plural(res.Omitted, "blob"), HumanBytes(res.OmittedSize), receipt.Source, res.Root.Digest)
			return nil
		},
	}
	file.Register(cmd, "delta archive to write (.tar.zst or .tar; required)")
	cmd.Flags().StringVar(&have, "have", "", "what the far side holds: a receipt (ferry registry have), an older package, or a registry reference (required)")
	cmd.Flags().StringArrayVar(&keys, "have-key", nil, "cosign public key the receipt must be signed with (repeatable: any one)")
	cmd.Flags().StringVar(&sig, "have-signature", "", "the receipt's detached signature (default: RECEIPT.sig)")
	remote.Register(cmd)
	output.Register(cmd)
	return cmd
}

// isReceipt reports whether path is a file whose content starts as JSON:
// a receipt, not a package (archives start with a tar or zstd header).
func isReceipt(path string) bool {
	// Without blocking on a FIFO; only a regular file can be a receipt.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	var b [64]byte
	n, _ := f.Read(b[:])
	for _, c := range b[:n] {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// loadHave reads what --have names: a receipt (its signature checked with
// keys when given), or the blobs of a package on disk or in a registry.
func loadHave(cmd *cobra.Command, have string, keys []string, sigPath string, remote RemoteFlags) (*artifact.Receipt, error) {
	if isReceipt(have) {
		data, err := confine.ReadPath(have, artifact.MaxReceiptSize)
		if err != nil {
			return nil, err
		}
		if len(keys) > 0 {
			if sigPath == "" {
				sigPath = have + ".sig"
			}
			sig, err := readSignature(sigPath)
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("--have-key: the receipt's signature %s is missing (ferry registry have --key signs it; --have-signature names another file)", sigPath)
			}
			if err != nil {
				return nil, err
			}
			pubs, err := LoadVerifyKeys(keys)
			if err != nil {
				return nil, err
			}
			if _, err := artifact.VerifyReceipt(data, sig, pubs); err != nil {
				return nil, fmt.Errorf("%s: %w", have, err)
			}
		}
		rc, err := artifact.ParseReceipt(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", have, err)
		}
		return rc, nil
	}
	src, ref, err := OpenSource(cmd, have, remote)
	if err != nil {
		return nil, err
	}
	return artifact.Have(cmd.Context(), src, ref)
}

// readSignature reads a receipt's detached signature, refusing one larger
// than a signature payload may be.
func readSignature(name string) ([]byte, error) {
	data, err := confine.ReadPath(name, artifact.MaxSignaturePayload)
	if errors.Is(err, confine.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %w", artifact.ErrCorrupt, err)
	}
	return data, err
}
