package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/mirror"
)

func newRegistryLoadCmd() *cobra.Command {
	var (
		st     storageOptions
		addr   string
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "load PKG... [--root DIR | --storage s3://…]",
		Short: "Load packages into a registry's storage as an offline mirror, without serving",
		Example: `  # Load two packages into the default storage root, then serve it
  ferry registry load app.tar.zst db.tar.zst
  ferry registry serve

  ferry registry load app.tar.zst --root /srv/registry --addr mirror.example.com:5000`,
		Long: `Load packages into the storage a later ` + "`ferry registry serve --root DIR`" + ` serves:
each package under its own name (<name>:<version>), and each of its images
under its original repository path and tag without the registry host
(docker.io/library/nginx:1.27 → library/nginx:1.27, ghcr.io/org/app:v1 →
org/app:v1), by the digest the package recorded. Prints the containerd and
docker configuration that pulls them from the mirror at --addr, the address
clients will reach the registry at (default ` + registry.DefaultAddr + `).

When it ends it removes the upload sessions in the storage that nothing wrote to
since it started: what an earlier load that was killed left behind.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			cfg, err := st.config()
			if err != nil {
				return err
			}
			results, err := loadPackages(cmd.Context(), cfg, args)
			if err != nil {
				return err
			}
			if output.JSON() {
				out := map[string]any{"storage": storageName(cfg), "loaded": results}
				if cfg.RootDir != "" {
					out["root"] = cfg.RootDir
				}
				return cli.WriteJSON(cmd.OutOrStdout(), out)
			}
			printLoaded(cmd.OutOrStdout(), results, addr)
			return nil
		},
	}
	st.register(cmd.Flags())
	cmd.Flags().StringVar(&addr, "addr", registry.DefaultAddr, "host:port the registry serving this storage is reached at (for the printed mirror configuration)")
	output.Register(cmd)
	return cmd
}

// registryRoot is --root made absolute, or the default root.
func registryRoot(root string) (string, error) {
	if root == "" {
		return defaultRegistryRoot()
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("--root: %w", err)
	}
	return abs, nil
}

// loadPackages opens the packages and loads them into cfg's storage.
func loadPackages(ctx context.Context, cfg registry.Config, paths []string) ([]*artifact.MirrorResult, error) {
	var readers []*artifact.Reader
	for _, p := range paths {
		r, err := artifact.Open(ctx, p)
		if err != nil {
			return nil, err
		}
		readers = append(readers, r)
	}
	return mirror.LoadInto(ctx, cfg, readers)
}

// printLoaded lists what was loaded and the mirror configuration for addr.
func printLoaded(w io.Writer, results []*artifact.MirrorResult, addr string) {
	for _, r := range results {
		fmt.Fprintf(w, "loaded package %s (%s)\n", r.Package, r.Root)
		for _, i := range r.Images {
			fmt.Fprintf(w, "  %s → %s:%s@%s\n", i.Ref, i.Repository, i.Tag, i.Digest)
		}
	}
	fmt.Fprintf(w, "\n%s", mirror.Snippets(addr, results))
}
