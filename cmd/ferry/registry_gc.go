//go:build !ferryfront

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrypkg/ferry/registry"
)

// storageOptions is where a local registry (serve, load, gc) keeps its
// content: a directory (--root) or an S3 bucket (--storage).
type storageOptions struct {
	root    string
	storage string
}

const storageHelp = `S3-compatible storage instead of --root: s3://bucket[/prefix]?endpoint=URL&region=R&path-style=true.
Credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_SHARED_CREDENTIALS_FILE),
never from the URL; a private CA for the endpoint from AWS_CA_BUNDLE`

func (o *storageOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.root, "root", "", "storage root directory (default $XDG_DATA_HOME/ferry/registry or ~/.local/share/ferry/registry)")
	f.StringVar(&o.storage, "storage", "", storageHelp)
}

// config is the registry configuration of the chosen storage.
func (o storageOptions) config() (registry.Config, error) {
	if o.storage != "" {
		if o.root != "" {
			return registry.Config{}, fmt.Errorf("--root and --storage: pass one")
		}
		s3, err := registry.ParseS3URL(o.storage)
		if err != nil {
			return registry.Config{}, fmt.Errorf("--storage: %w", err)
		}
		return registry.Config{S3: s3}, nil
	}
	root, err := registryRoot(o.root)
	if err != nil {
		return registry.Config{}, err
	}
	return registry.Config{RootDir: root}, nil
}

// storageName is how output names cfg's storage.
func storageName(cfg registry.Config) string {
	if cfg.S3 != nil {
		return cfg.S3.String()
	}
	return cfg.RootDir
}

func newRegistryGCCmd() *cobra.Command {
	var (
		st     storageOptions
		settle time.Duration
		output outputFlag
	)
	cmd := &cobra.Command{
		Use:   "gc [--root DIR | --storage s3://…]",
		Short: "Garbage-collect a registry's storage while it serves pulls",
		Long: `Delete from a registry's storage every blob no manifest references (distribution's
mark and sweep), while the registries serving it keep serving pulls: it puts the
storage in read-only maintenance mode, which every ` + "`ferry registry serve`" + ` on it
follows within 2 s (pushes and deletes are refused meanwhile), waits --settle,
collects once, and returns it to read-write.

For the in-cluster registry, ` + "`ferry remove`" + ` does this itself.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			cfg, err := st.config()
			if err != nil {
				return err
			}
			return runRegistryGC(cmd.Context(), cmd.OutOrStdout(), cfg, settle, output)
		},
	}
	st.register(cmd.Flags())
	cmd.Flags().DurationVar(&settle, "settle", 0, "how long to wait in read-only mode before collecting, for every registry to see it (default 5s)")
	output.register(cmd)
	return cmd
}

func runRegistryGC(ctx context.Context, w io.Writer, cfg registry.Config, settle time.Duration, output outputFlag) error {
	res, err := registry.GarbageCollect(ctx, cfg, registry.GCOptions{Settle: settle})
	if err != nil {
		return err
	}
	if output.json() {
		return writeJSON(w, map[string]any{"storage": storageName(cfg), "before": res.Before, "after": res.After})
	}
	fmt.Fprintf(w, "garbage-collected %s: %s → %s\n", storageName(cfg), humanBytes(res.Before), humanBytes(res.After))
	return nil
}
