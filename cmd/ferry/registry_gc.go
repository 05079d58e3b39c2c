package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
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
		dryRun bool
		output cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "gc [--dry-run] [--root DIR | --storage s3://…]",
		Short: "Garbage-collect a registry's storage while it serves pulls",
		Example: `  # What a collection of the default storage root would free
  ferry registry gc --dry-run

  ferry registry gc --root /var/lib/ferry/registry
  ferry registry gc --storage 's3://ferry-registry?endpoint=https://minio.example.com&path-style=true'`,
		Long: `Delete from a registry's storage every blob no manifest references (distribution's
mark and sweep), while the registries serving it keep serving pulls: it puts the
storage in read-only maintenance mode, which every ` + "`ferry registry serve`" + ` on it
follows within 2 s (pushes and deletes are refused meanwhile), waits --settle,
collects once, and returns it to read-write. It also removes the upload sessions
nothing wrote to since read-only mode began (none can be meanwhile): those of a
killed ` + "`ferry registry load`" + ` or of a client that gave up, whose data would stay
otherwise (a serving registry removes sessions older than 24 h itself). --dry-run
says what it would free and deletes nothing (no read-only mode).

For the in-cluster registry, ` + "`ferry remove`" + ` does this itself.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			cfg, err := st.config()
			if err != nil {
				return err
			}
			return runRegistryGC(cmd.Context(), cmd.OutOrStdout(), cfg, registry.GCOptions{Settle: settle, DryRun: dryRun}, output)
		},
	}
	st.register(cmd.Flags())
	cmd.Flags().DurationVar(&settle, "settle", 0, "how long to wait in read-only mode before collecting, for every registry to see it (default 5s)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what a collection would free; delete nothing")
	output.Register(cmd)
	return cmd
}

func runRegistryGC(ctx context.Context, w io.Writer, cfg registry.Config, opts registry.GCOptions, output cli.OutputFlag) error {
	res, err := registry.GarbageCollect(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if output.JSON() {
		return cli.WriteJSON(w, map[string]any{"storage": storageName(cfg), "before": res.Before, "after": res.After, "dryRun": res.DryRun, "blobs": res.Blobs, "uploads": res.Uploads})
	}
	if res.DryRun {
		fmt.Fprintf(w, "garbage collection of %s would free %s in %d blobs (%s → %s); nothing deleted\n", storageName(cfg), cli.HumanBytes(res.Freeable), res.Blobs, cli.HumanBytes(res.Before), cli.HumanBytes(res.After))
		return nil
	}
	fmt.Fprintf(w, "garbage-collected %s: %s → %s", storageName(cfg), cli.HumanBytes(res.Before), cli.HumanBytes(res.After))
	if res.Uploads.Sessions > 0 {
		fmt.Fprintf(w, " (%d abandoned upload sessions, %s, removed)", res.Uploads.Sessions, cli.HumanBytes(res.Uploads.Bytes))
	}
	fmt.Fprintln(w)
	return nil
}

// storageArg is a storage named by one argument: an s3:// URL or a
// directory.
func storageArg(flag, s string) (registry.Config, error) {
	if s == "" {
		return registry.Config{}, fmt.Errorf("%s: want a directory or an s3:// URL", flag)
	}
	o := storageOptions{root: s}
	if strings.HasPrefix(s, "s3://") {
		o = storageOptions{storage: s}
	}
	cfg, err := o.config()
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", flag, err)
	}
	return cfg, nil
}

func newRegistryMigrateCmd() *cobra.Command {
	var (
		from, to string
		settle   time.Duration
		output   cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "migrate --from DIR|s3://… --to DIR|s3://…",
		Short: "Copy a registry's storage to another, verifying every blob, while it serves pulls",
		Example: `  # Move a registry from its directory to an S3 bucket while it serves pulls
  ferry registry migrate --from /var/lib/ferry/registry --to 's3://ferry-registry?endpoint=https://minio.example.com&path-style=true'`,
		Long: `Copy every repository of a registry's storage (a directory or an S3 bucket) to another
— every object, so tags, untagged manifests, referrers and sha512 digest aliases
come along —, then read back every blob from the destination and check its digest.
The source is in read-only maintenance mode meanwhile (the registries serving it
keep serving pulls) and read-write again afterwards. Then serve the destination
(` + "`ferry registry serve --storage`" + `). S3 credentials come from the AWS SDK's
environment, for both sides.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			src, err := storageArg("--from", from)
			if err != nil {
				return err
			}
			dst, err := storageArg("--to", to)
			if err != nil {
				return err
			}
			res, err := registry.Migrate(cmd.Context(), src, dst, registry.GCOptions{Settle: settle})
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), map[string]any{"from": storageName(src), "to": storageName(dst), "result": res})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "copied %d objects (%s) from %s to %s; %d blobs verified\n", res.Objects, cli.HumanBytes(res.Bytes), storageName(src), storageName(dst), res.Blobs)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the storage to copy: a directory or "+"s3://bucket[/prefix]?endpoint=URL&region=R&path-style=true")
	cmd.Flags().StringVar(&to, "to", "", "the storage to copy to (new, served by no registry yet)")
	cmd.Flags().DurationVar(&settle, "settle", 0, "how long to wait in read-only mode before copying, for every registry to see it (default 5s)")
	output.Register(cmd)
	return cmd
}
