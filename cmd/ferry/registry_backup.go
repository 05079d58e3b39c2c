package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	orasregistry "oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/backup"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// maxRestoreArgs bounds the backups one restore takes (a chain of 1,000).
const maxRestoreArgs = 1000

func newRegistryBackupCmd() *cobra.Command {
	var (
		kube      kubeFlags
		via       viaFlag
		output    cli.OutputFlag
		file      string
		keyPath   string
		since     string
		inCluster bool
		namespace string
		packages  []string
		repos     []string
	)
	cmd := &cobra.Command{
		Use:   "backup --cluster -f FILE|s3://BUCKET/KEY",
		Short: "Back up the in-cluster registry, its Packages and their keys",
		Example: `  # Everything, signed
  ferry registry backup --cluster -f backup-full.tar --key cosign.key

  # Only what package app uses, to S3 (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)
  ferry registry backup --cluster --package app -f 's3://backups/site-a/app.tar?endpoint=https://minio.local:9000&path-style=true'

  # What changed since the last backup
  ferry registry backup --cluster -f backup-2.tar --since backup-full.tar --key cosign.key`,
		Long: `Write the in-cluster registry's content (every repository and tag, or the
repositories of --package and --repository) into one archive, a package in the
OCI layout (` + "`ferry package verify --key`" + ` checks it), with what restore needs
to bring the Packages back: the Package objects (spec only) and the Secrets and
ConfigMaps holding the public keys they name. Each blob is written once and
checked against its digest; --key signs the backup's root.

The archive is written beside FILE (FILE.partial) and renamed when whole; to
S3, as one multipart upload completed at the end. An interrupted backup run
again goes on where it stopped (FILE.resume.json, KEY.resume.json keep what
it needs) when the registry did not change meanwhile, else starts over.

--since names the previous backup (a file, an s3:// URL, or a receipt from
` + "`ferry registry have`" + `): the blobs it and its chain hold are left out, and
the backup records which one it extends; restore then needs the chain.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if !inCluster {
				return errors.New("name the registry to back up: --cluster (the registry `ferry init` set up)")
			}
			if file == "" {
				return errors.New("-f FILE is required: the backup to write (a file or s3://BUCKET/KEY)")
			}
			dst, err := backup.ParseDestination(file)
			if err != nil {
				return err
			}
			opts := backup.Options{Packages: packages, Repositories: repos}
			if since != "" {
				if opts.Since, err = backup.ReadBase(cmd.Context(), since); err != nil {
					return fmt.Errorf("--since %w", err)
				}
			}
			if keyPath != "" {
				k, err := loadSignKey(cmd, keyPath)
				if err != nil {
					return err
				}
				opts.Key = k
			}
			c, reg, name, ep, err := openBackupCluster(cmd, &kube, &via, namespace)
			if err != nil {
				return err
			}
			defer ep.Close()
			progress, done := cli.NewProgress(cmd)
			opts.Progress = progress
			res, err := backup.Write(cmd.Context(), backup.Source{Registry: reg, Name: name, Client: c, Namespace: namespace}, dst, opts)
			done()
			if err != nil {
				return tunnelCause(err, ep)
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "backup of %s: %d repositories, %d tags, %d Packages, %d keys → %s (%s)\n", name, res.Repositories, res.Tags, res.Packages, res.Keys, res.Destination, cli.HumanBytes(res.Size))
			fmt.Fprintf(w, "root %s, %d blobs carried (%s)", res.Root.Digest, res.Carried, cli.HumanBytes(res.CarriedSize))
			if res.Base != nil {
				fmt.Fprintf(w, ", %d left to %s (%s)", res.Omitted, res.Base.Name, cli.HumanBytes(res.OmittedSize))
			}
			fmt.Fprintln(w)
			if res.Resumed > 0 {
				fmt.Fprintf(w, "resumed at %s of %s\n", cli.HumanBytes(res.Resumed), cli.HumanBytes(res.Size))
			}
			if res.Signed {
				fmt.Fprintf(w, "signed with %s\n", keyPath)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the backup to write: a file, or s3://BUCKET/KEY[?endpoint=URL&region=R&path-style=true] (required)")
	cmd.Flags().StringVar(&keyPath, "key", "", "cosign private key to sign the backup with")
	cmd.Flags().StringVar(&since, "since", "", "the previous backup (file, s3:// URL) or a receipt: write only what it lacks")
	cmd.Flags().BoolVar(&inCluster, "cluster", false, "back up the in-cluster registry that ferry init set up")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	cmd.Flags().StringArrayVar(&packages, "package", nil, "back up only this Package's repositories (its own and those its ferry.json names); repeatable")
	cmd.Flags().StringArrayVar(&repos, "repository", nil, "back up only this repository; repeatable")
	kube.register(cmd)
	via.register(cmd, reach.Auto)
	output.Register(cmd)
	return cmd
}

func newRegistryRestoreCmd() *cobra.Command {
	var (
		kube      kubeFlags
		via       viaFlag
		output    cli.OutputFlag
		keys      []string
		inCluster bool
		noWait    bool
		namespace string
		timeout   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "restore --cluster BACKUP [BACKUP…]",
		Short: "Restore backups into the in-cluster registry and bring their Packages back",
		Example: `  # Into a cluster just set up with ferry init
  ferry registry restore --cluster backup-full.tar --key cosign.pub

  # A chain: the full backup and the incremental ones after it
  ferry registry restore --cluster backup-full.tar backup-2.tar backup-3.tar --key cosign.pub

  # From S3
  ferry registry restore --cluster 's3://backups/site-a/full.tar?endpoint=https://minio.local:9000&path-style=true'`,
		Long: `Restore backups that ` + "`ferry registry backup`" + ` wrote into the in-cluster registry
of a cluster after ` + "`ferry init`" + `: every blob and manifest pushed by digest into each
repository that held it, then the tags; then the key Secrets and the Package
objects of the last backup are applied, and each Package is waited for until it
is Ready (as deploy waits), unless --no-wait.

An incremental backup needs the backups it extends: give the chain, in any
order; a missing link is named. With --key (public keys, repeatable), each
backup must be signed by one of them: its signature and every blob are checked
before anything is written. Without it every blob is still checked against its
digest as it is pushed. A backup on S3 is downloaded to a temporary file first.`,
		Args: cobra.RangeArgs(1, maxRestoreArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if !inCluster {
				return errors.New("name the registry to restore into: --cluster (the registry `ferry init` set up)")
			}
			ctx := cmd.Context()
			verifiers, err := cli.LoadVerifyKeys(keys)
			if err != nil {
				return err
			}
			paths, cleanup, err := backup.LocalFiles(ctx, args)
			defer cleanup()
			if err != nil {
				return err
			}
			var infos []*backup.Info
			for _, p := range paths {
				in, err := backup.ReadInfoFile(p)
				if err != nil {
					return err
				}
				infos = append(infos, in)
			}
			if _, err := backup.Chain(infos); err != nil {
				return err
			}
			c, reg, _, ep, err := openBackupCluster(cmd, &kube, &via, namespace)
			if err != nil {
				return err
			}
			defer ep.Close()
			progress, done := cli.NewProgress(cmd)
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			res, err := backup.Restore(ctx, backup.Target{Registry: reg, Client: c}, paths, backup.RestoreOptions{
				Keys: verifiers, NoWait: noWait, Progress: progress,
				Seen: func(pkg string, cond metav1.Condition) {
					if !output.JSON() {
						fmt.Fprintf(cmd.ErrOrStderr(), "Package %s: %s=%s %s\n", pkg, cond.Type, cond.Status, cond.Reason)
					}
				},
			})
			done()
			if err != nil {
				return tunnelCause(err, ep)
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "restored %d backups: %d repositories, %d tags; %d blobs pushed (%s), %d mounted, %d there already\n",
				len(res.Backups), res.Repositories, res.Tags, res.Pushed, cli.HumanBytes(res.PushedSize), res.Mounted, res.Held)
			fmt.Fprintf(w, "%d keys, Packages applied: %s; Ready: %s\n", res.Keys, strings.Join(res.Packages, ", "), strings.Join(res.Ready, ", "))
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&keys, "key", nil, "cosign public key each backup must be signed with; repeatable")
	cmd.Flags().BoolVar(&inCluster, "cluster", false, "restore into the in-cluster registry that ferry init set up")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "apply the Packages without waiting for them to be Ready")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long the restore and the wait for the Packages may take")
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	kube.register(cmd)
	via.register(cmd, reach.Auto)
	output.Register(cmd)
	return cmd
}

// openBackupCluster gives backup and restore the cluster's Package client
// and its in-cluster registry (with its name and the way to it, to close).
func openBackupCluster(cmd *cobra.Command, kube *kubeFlags, via *viaFlag, ns string) (client.WithWatch, orasregistry.Registry, string, *reach.Endpoint, error) {
	cs, cfg, err := kube.clientConfig()
	if err != nil {
		return nil, nil, "", nil, err
	}
	c, err := deploy.PackageClient(cfg)
	if err != nil {
		return nil, nil, "", nil, err
	}
	reg, name, ep, err := clusterRegistry(cmd, cs, cfg, via, ns)
	if err != nil {
		return nil, nil, "", nil, err
	}
	return c, reg, name, ep, nil
}
