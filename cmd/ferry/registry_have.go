package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/atomicfile"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

func newRegistryHaveCmd() *cobra.Command {
	var (
		kube      kubeFlags
		via       viaFlag
		remote    cli.RemoteFlags
		output    cli.OutputFlag
		file      string
		keyPath   string
		inCluster bool
		namespace string
		prefix    string
	)
	cmd := &cobra.Command{
		Use:   "have [REGISTRY[/PREFIX] | PKG | REF | --cluster] -f RECEIPT",
		Short: "Write a receipt of the blobs a registry, a cluster or a package holds",
		Example: `  # What the in-cluster registry holds, signed with the far side's key
  ferry registry have --cluster -f receipt.json --key far-side.key

  # Only what package app's repository holds (where deploy puts app's next version)
  ferry registry have --cluster --prefix app -f receipt.json

  # A registry (every repository of its catalog), or the repositories under a prefix
  ferry registry have registry.local:5000 -f receipt.json
  ferry registry have registry.local:5000/apps -f receipt.json

  # One package, on disk or in a registry
  ferry registry have app-1.0.0.tar.zst -f receipt.json`,
		Long: `Write a receipt into RECEIPT (JSON, atomically): the digest and size of every
blob the far side holds, what it was made from and when. Carried back across
the air gap, it tells ` + "`ferry package delta`" + ` what a delta need not carry.

From a registry (host[:port], optionally /PREFIX to list only the
repositories under it, as --prefix does), every tag of every repository its
catalog lists and everything their manifests reach; with --cluster, the registry ` + "`ferry init`" + `
set up, reached as deploy reaches it (--registry-via); from a package
archive, layout folder or registry reference (host/repository:tag), the
blobs of that package.

With --key (a cosign private key; password from COSIGN_PASSWORD or the
terminal), RECEIPT.sig gets a detached signature over the receipt's bytes
(base64, as cosign sign-blob writes it), for package delta --have-key.
Nothing in a receipt is trusted: a blob it lists wrongly is found missing or
damaged when the delta is pushed, before anything is written.

A registry keeps blobs per repository, and a delta is completed in one (deploy
and registry load put a package into the repository of its name), from what
that repository holds (package push --mount-from REPO adds REPO). --prefix
NAME lists only what the package's own repository holds, so that a delta
made against it carries the rest.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if file == "" {
				return fmt.Errorf("-f RECEIPT is required: the receipt to write")
			}
			if inCluster == (len(args) == 1) {
				return fmt.Errorf("name one source: a registry, a package or a reference, or --cluster")
			}
			var signer artifact.Signer
			if keyPath != "" {
				k, err := loadSignKey(cmd, keyPath)
				if err != nil {
					return err
				}
				signer = k
			}
			rc, err := receiptOf(cmd, args, inCluster, &kube, &via, namespace, prefix, remote)
			if err != nil {
				return err
			}
			data, err := rc.Marshal()
			if err != nil {
				return err
			}
			if err := writeReceiptFile(file, data); err != nil {
				return err
			}
			sigFile := ""
			if signer != nil {
				sig, err := artifact.SignReceipt(data, signer)
				if err != nil {
					return err
				}
				sigFile = file + ".sig"
				if err := writeReceiptFile(sigFile, sig); err != nil {
					return err
				}
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]any{
					"path": file, "signature": sigFile, "source": rc.Source, "blobs": len(rc.Blobs), "size": rc.Size(),
				})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "receipt of %s: %d blobs, %s → %s (%s)\n", rc.Source, len(rc.Blobs), cli.HumanBytes(rc.Size()), file, cli.HumanBytes(int64(len(data))))
			if sigFile != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "signed with %s → %s\n", keyPath, sigFile)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "receipt to write (required)")
	cmd.Flags().StringVar(&keyPath, "key", "", "cosign private key to sign the receipt with (writes RECEIPT.sig)")
	cmd.Flags().BoolVar(&inCluster, "cluster", false, "list the in-cluster registry that ferry init set up")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace (with --cluster)")
	cmd.Flags().StringVar(&prefix, "prefix", "", "list only the repository of this name and those under it (a registry or --cluster)")
	kube.register(cmd)
	via.register(cmd, reach.Auto)
	remote.Register(cmd)
	output.Register(cmd)
	return cmd
}

// receiptOf makes the receipt of what args (or --cluster) name.
func receiptOf(cmd *cobra.Command, args []string, inCluster bool, kube *kubeFlags, via *viaFlag, ns, prefix string, remote cli.RemoteFlags) (*artifact.Receipt, error) {
	ctx := cmd.Context()
	if inCluster {
		cs, cfg, err := kube.clientConfig()
		if err != nil {
			return nil, err
		}
		reg, name, ep, err := clusterRegistry(cmd, cs, cfg, via, ns)
		if err != nil {
			return nil, err
		}
		defer ep.Close()
		rc, err := artifact.HaveRegistry(ctx, reg, withPrefix(name, prefix), prefix)
		if err != nil {
			return nil, tunnelCause(err, ep)
		}
		return rc, nil
	}
	arg := args[0]
	if host, argPrefix, ok := registryArg(arg); ok {
		if argPrefix != "" && prefix != "" {
			return nil, fmt.Errorf("%s names a prefix already; drop --prefix", arg)
		}
		if argPrefix != "" {
			prefix = argPrefix
		}
		ro, err := remote.Options(cmd, host)
		if err != nil {
			return nil, err
		}
		reg, err := ro.Registry(host)
		if err != nil {
			return nil, err
		}
		return artifact.HaveRegistry(ctx, reg, withPrefix(host, prefix), prefix)
	}
	if prefix != "" {
		return nil, fmt.Errorf("--prefix lists part of a registry; %s is a package", arg)
	}
	src, ref, err := cli.OpenSource(cmd, arg, remote)
	if err != nil {
		return nil, err
	}
	return artifact.Have(ctx, src, ref)
}

// registryArg reports whether arg names a registry (host[:port]) or the
// repositories under a prefix of one (host/prefix, no tag or digest), and
// not a file or folder on disk.
func registryArg(arg string) (host, prefix string, ok bool) {
	if _, err := os.Stat(arg); err == nil {
		return "", "", false
	}
	arg = strings.TrimSuffix(strings.TrimPrefix(arg, cli.OCIScheme), "/")
	host, prefix, _ = strings.Cut(arg, "/")
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		return "", "", false
	}
	if prefix == "" {
		return host, "", true
	}
	ref, err := registry.ParseReference(arg)
	if err != nil || ref.Reference != "" {
		return "", "", false
	}
	return host, prefix, true
}

// writeFile writes data at path atomically.
func writeReceiptFile(path string, data []byte) error {
	_, err := atomicfile.Write(path, 0o644, func(w io.Writer) error { _, err := w.Write(data); return err })
	return err
}

// withPrefix names a registry, or the repositories under prefix in it.
func withPrefix(host, prefix string) string {
	if prefix == "" {
		return host
	}
	return host + "/" + strings.Trim(prefix, "/")
}

// clusterRegistry reaches the in-cluster registry of namespace ns as
// deploy does (via): the registry, its name on the nodes, and the way
// there, which the caller closes.
func clusterRegistry(cmd *cobra.Command, cs kubernetes.Interface, cfg *rest.Config, via *viaFlag, ns string) (registry.Registry, string, *reach.Endpoint, error) {
	ep, err := via.open(cmd, cs, cfg, ns, "", "")
	if err != nil {
		return nil, "", nil, err
	}
	state, account, err := cluster.ReadRegistry(cmd.Context(), cs.CoreV1().Secrets(ns))
	if err != nil {
		ep.Close()
		return nil, "", nil, err
	}
	reg, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(ep.Host, auth.Credential{Username: account.Username, Password: account.Password}), Client: reach.RegistryClient()}.Registry(ep.Host)
	if err != nil {
		ep.Close()
		return nil, "", nil, err
	}
	return reg, state.Registry, ep, nil
}
