package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// listed is one package ferry list shows: a Package of ferry's namespace
// (every deploy applies one; `ferry init` migrates what an earlier ferry
// recorded without one).
type listed struct {
	Name       string        `json:"name"`
	Version    string        `json:"version"`
	Root       digest.Digest `json:"root"`
	Components []string      `json:"components"`
	// Package is always true (kept for the scripts that read it); Ready,
	// Reason and Message are its Ready condition.
	Package bool   `json:"package"`
	Ready   string `json:"ready,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// ImagePolicies are the Package status's: the image signature
	// policies the agent enforces.
	ImagePolicies []v1alpha1.ImagePolicyStatus `json:"imagePolicies,omitempty"`
}

func newListCmd() *cobra.Command {
	var (
		kube      kubeFlags
		output    cli.OutputFlag
		namespace string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the packages deployed in the cluster (its Packages)",
		Example: `  ferry list
  ferry list --context prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			cs, cfg, err := kube.clientConfig()
			if err != nil {
				return err
			}
			pc, err := packageClient(cfg)
			if err != nil {
				return err
			}
			items, err := listPackages(cmd.Context(), cs, pc, namespace)
			if err != nil {
				return err
			}
			if output.JSON() {
				return cli.WriteJSON(cmd.OutOrStdout(), items)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tREADY\tROOT\tCOMPONENTS\tIMAGE POLICIES")
			for _, p := range items {
				ready := p.Ready
				if p.Ready != string(metav1.ConditionTrue) && p.Reason != "" {
					ready += " " + p.Reason
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Version, ready, p.Root, strings.Join(p.Components, ","), policySummary(p.ImagePolicies))
			}
			return tw.Flush()
		},
	}
	kube.register(cmd)
	output.Register(cmd)
	cmd.Flags().StringVarP(&namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	return cmd
}

// listPackages lists the Packages of ferry's namespace by name, each with
// the components the controller installed.
func listPackages(ctx context.Context, cs kubernetes.Interface, pc client.Client, ns string) ([]listed, error) {
	recs, err := (&rollout.State{Client: cs, Namespace: ns}).List(ctx)
	if err != nil {
		return nil, err
	}
	var pkgs v1alpha1.PackageList
	if err := pc.List(ctx, &pkgs, client.InNamespace(ns)); err != nil && !meta.IsNoMatchError(err) {
		return nil, fmt.Errorf("list Packages: %w", err)
	}
	out := []listed{}
	for _, p := range pkgs.Items {
		l := listed{Name: p.Name, Version: p.Status.Version, Root: digest.Digest(p.Status.Digest), Components: p.Spec.Components, Package: true,
			ImagePolicies: p.Status.ImagePolicies}
		if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.Ready); c != nil {
			l.Ready, l.Reason, l.Message = string(c.Status), c.Reason, c.Message
		}
		if i := slices.IndexFunc(recs, func(r *rollout.Record) bool { return r.Name == p.Name }); i >= 0 && l.Root == recs[i].Root {
			l.Components = recs[i].Components
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b listed) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// policySummary shows image policies in one cell: each as name (required
// or optional, its authorities — keys by their fingerprint's first 12
// digits — and how many images it covers); "-" when none.
func policySummary(ps []v1alpha1.ImagePolicyStatus) string {
	if len(ps) == 0 {
		return "-"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		req := "optional"
		if p.Required {
			req = "required"
		}
		auth := make([]string, len(p.Authorities))
		for j, a := range p.Authorities {
			if k, ok := strings.CutPrefix(a, "key sha256:"); ok && len(k) > 12 {
				a = "key " + k[:12]
			}
			auth[j] = a
		}
		out[i] = fmt.Sprintf("%s (%s, %s, %d images)", p.Name, req, strings.Join(auth, " | "), len(p.Images))
	}
	return strings.Join(out, "; ")
}

// deployFlags are what deploy (and deploy --via-agent) ask of the cluster.
type deployFlags struct {
	components []string
	set        []string
	timeout    time.Duration
	insecure   bool
}

// deployLong is deploy's help.
const deployLong = `Verify the package (archive, layout folder, or registry reference, which is
first pulled into a temporary archive — with --key, nothing is pulled unless
its signature verifies) fail closed — a valid signature over its root by
--key, and every blob re-hashed — then push it into the registry ` + "`ferry init`" + `
set up: the package under its name, its images under their original paths
by the digests the package recorded (blobs already there are skipped).

Then apply its Package object (ferry.dev/v1alpha1, ` + "`kubectl get packages -n ferry`" + `):
the package by digest, the --key public keys (stored in Secrets), the
components, the --set values. The Package controller verifies the package
again in the cluster and installs or upgrades each selected component's
charts with Helm (waiting until ready, rolled back on failure) and applies
its manifests (server-side apply), every workload's images rewritten to the
in-cluster registry by digest; it removes what an earlier version installed
and this one does not. deploy prints the Package's conditions as they change
and returns when it is Ready, or with the reason it is not (--wait=false:
at once). Unsigned packages are refused unless
--insecure-skip-signature-verification.

deploy runs on a node or on a workstation that reaches only the API server:
it pushes through 127.0.0.1:<NodePort> when that leads to the registry, else
through a tunnel to a registry Pod, opened for the command (--registry-via).

--via-agent streams the archive instead to the agent's upload endpoint, in
one HTTPS stream through a tunnel: the agent checks this kubeconfig's bearer
token (TokenReview) and that its user may create or update Packages in
ferry's namespace, verifies the package against the keys the cluster trusts
(the public-key Secrets in ferry's namespace, which deploy --key and
` + "`ferry init --key`" + ` store) before it writes anything, pushes it and
applies its Package. --key then verifies it here as well, first.`

// deployOptions are deploy's flags.
type deployOptions struct {
	kube      kubeFlags
	output    cli.OutputFlag
	keys      []string
	flags     deployFlags
	namespace string
	remote    cli.RemoteFlags
	via       viaFlag
	wait      bool
	viaAgent  bool
}

func newDeployCmd() *cobra.Command {
	var o deployOptions
	cmd := &cobra.Command{
		Use:   "deploy PKG|REF --key cosign.pub",
		Short: "Verify a package, push its images into the cluster, install its charts and manifests",
		Example: `  # Deploy an archive, verified with your public key
  ferry deploy app.tar.zst --key cosign.pub

  # Deploy from a registry: only some components, a chart value set
  ferry deploy registry.example.com/apps/app:1.0.0 --key cosign.pub --components web,db --set replicaCount=2`,
		Long: deployLong,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.output.Validate(); err != nil {
				return err
			}
			if o.viaAgent {
				return deployViaAgent(cmd, &o.kube, o.output, args[0], o.namespace, o.keys, o.flags, o.wait)
			}
			run, err := o.prepare(cmd, args[0])
			if err != nil {
				return err
			}
			defer run.close()
			res, err := run.d.Run(cmd.Context(), run.r)
			run.done()
			if err != nil {
				return tunnelCause(err, run.ep)
			}
			return o.print(cmd.OutOrStdout(), run, res)
		},
	}
	o.kube.register(cmd)
	o.output.Register(cmd)
	cli.AddKeyFlag(cmd, &o.keys)
	cmd.Flags().BoolVar(&o.flags.insecure, "insecure-skip-signature-verification", false, "deploy without a signature check (blobs are still verified)")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	o.remote.Register(cmd)
	o.via.register(cmd, reach.Auto)
	cmd.Flags().StringSliceVar(&o.flags.components, "components", nil, "components to deploy, comma-separated (required ones always; default all)")
	cmd.Flags().StringArrayVar(&o.flags.set, "set", nil, "chart value KEY=VALUE, as helm --set (repeatable; given to every chart)")
	cmd.Flags().DurationVar(&o.flags.timeout, "timeout", deploy.DefaultTimeout, "how long each chart or manifest bundle may take to be ready")
	cmd.Flags().BoolVar(&o.wait, "wait", true, "wait until the controller reports the Package Ready (or why not)")
	cmd.Flags().BoolVar(&o.viaAgent, "via-agent", false, "upload the archive to the agent's endpoint (one HTTPS stream; the cluster's trusted keys decide) instead of pushing from here")
	return cmd
}

// deployRun is one deploy as the flags ask it: the action, the package
// (pulled into a temporary archive when a reference names it) and the way
// to the registry.
type deployRun struct {
	d    *deploy.Deploy
	r    *artifact.Reader
	ep   *reach.Endpoint
	done func() // ends the progress display
	undo []func()
}

// close undoes what prepare set up, last first.
func (run *deployRun) close() {
	for i := len(run.undo) - 1; i >= 0; i-- {
		run.undo[i]()
	}
}

// prepare turns the flags into a Deploy, opens the package arg (pulled
// first, verified as it downloads, when it is a reference) and the way to
// the registry. On an error, what it set up is undone.
func (o *deployOptions) prepare(cmd *cobra.Command, arg string) (_ *deployRun, err error) {
	if len(o.keys) == 0 && !o.flags.insecure {
		return nil, deploy.ErrUnsigned
	}
	pubs, err := cli.LoadPublicKeys(o.keys)
	if err != nil {
		return nil, err
	}
	values, err := deploy.ParseSet(o.flags.set)
	if err != nil {
		return nil, err
	}
	if _, err := o.via.parse(); err != nil {
		return nil, err
	}
	cs, cfg, err := o.kube.clientConfig()
	if err != nil {
		return nil, err
	}
	pc, err := packageClient(cfg)
	if err != nil {
		return nil, err
	}
	progress, done := cli.NewProgress(cmd)
	run := &deployRun{done: done, undo: []func(){done}}
	defer func() {
		if err != nil {
			run.close()
		}
	}()
	run.d = &deploy.Deploy{
		Client: cs, Packages: pc, Namespace: o.namespace,
		Keys: pubs, InsecureSkipSignatureVerification: o.flags.insecure,
		Components: o.flags.components, Values: values, Timeout: o.flags.timeout,
		NoWait: !o.wait, Progress: progress, Events: o.events(cmd.OutOrStdout(), o.namespace+"/"+arg, done),
	}
	path, ref, err := cli.ParseSource(arg)
	if err != nil {
		return nil, err
	}
	if path == "" {
		// Pulled with the keys, the package is verified as it
		// downloads: deploy does not hash it again before pushing.
		if path, err = o.pull(cmd, run, ref, pubs, progress); err != nil {
			return nil, err
		}
		run.d.Verified = len(pubs) > 0
	}
	if run.r, err = artifact.Open(cmd.Context(), path); err != nil {
		return nil, err
	}
	if run.ep, err = o.via.open(cmd, cs, cfg, o.namespace, "", ""); err != nil {
		return nil, err
	}
	run.undo = append(run.undo, func() { run.ep.Close() })
	run.d.Registry = run.ep.Host
	return run, nil
}

// pull downloads the package ref into a temporary archive, verified with
// pubs as it downloads, and returns its path; run's close removes it.
func (o *deployOptions) pull(cmd *cobra.Command, run *deployRun, ref string, pubs []*artifact.PublicKey, progress artifact.ProgressFunc) (string, error) {
	ro, err := o.remote.Options(cmd, ref)
	if err != nil {
		return "", err
	}
	tmp, err := scratch.MkdirTemp("", "ferry-deploy-")
	if err != nil {
		return "", err
	}
	run.undo = append(run.undo, func() { tmp.Remove() })
	path := filepath.Join(tmp.Path, "package.tar")
	repo, err := ro.Repository(ref)
	if err != nil {
		return "", err
	}
	if _, err := artifact.Pull(cmd.Context(), repo, repo.Reference.Reference, path, artifact.PullOptions{Keys: artifact.Verifiers(pubs), Progress: progress}); err != nil {
		return "", err
	}
	return path, nil
}

// events prints the Package's conditions as the controller changes them
// (not with -o json), and ends the progress display once the push is done.
func (o *deployOptions) events(out io.Writer, pkgName string, done func()) func(deploy.Event) {
	return func(ev deploy.Event) {
		if ev.Phase == deploy.PhasePushed {
			done()
		}
		if ev.Package != nil {
			pkgName = ev.Package.Namespace + "/" + ev.Package.Name
		}
		if c := ev.Condition; c != nil && !o.output.JSON() {
			fmt.Fprintf(out, "Package %s: %s=%s %s: %s\n", pkgName, c.Type, c.Status, c.Reason, c.Message)
		}
	}
}

// print shows what deploy did.
func (o *deployOptions) print(out io.Writer, run *deployRun, res *deploy.Result) error {
	r, ep := run.r, run.ep
	if !o.wait {
		if o.output.JSON() {
			return cli.WriteJSON(out, struct {
				*deploy.Pushed
				Package     string          `json:"package"`
				RegistryVia *reach.Endpoint `json:"registryVia"`
			}{res.Pushed, res.Package.Namespace + "/" + res.Package.Name, ep})
		}
		fmt.Fprintf(out, "pushed %s %s (%s); Package %s/%s applied, not waiting\n", r.Config().Name, r.Config().Version, r.Root().Digest, res.Package.Namespace, res.Package.Name)
		return nil
	}
	rec := res.Record
	if o.output.JSON() {
		return cli.WriteJSON(out, struct {
			*rollout.Record
			RegistryVia *reach.Endpoint `json:"registryVia"`
		}{rec, ep})
	}
	fmt.Fprintf(out, "deployed %s %s (%s)\n", rec.Name, rec.Version, rec.Root)
	fmt.Fprintf(out, "registry via %s\n", ep)
	return nil
}

func newRemoveCmd() *cobra.Command {
	var (
		kube   kubeFlags
		output cli.OutputFlag
		rm     deploy.Remove
		via    viaFlag
	)
	cmd := &cobra.Command{
		Use:   "remove NAME...",
		Short: "Remove deployed packages: their releases, manifests and unshared images",
		Example: `  ferry remove app
  ferry remove app db cache --context prod --timeout 10m`,
		Long: `Delete the Package NAME and wait until it is gone: the Package controller
uninstalls its Helm releases, deletes the objects of its manifests, deletes
its images from the in-cluster registry unless another deployed package
uses them, forgets it, and garbage-collects the registry's storage. Several
names are removed together, with one garbage collection for all of them.
A package recorded by an earlier ferry that no Package holds yet is removed
by this command itself, the same way. The registry must answer first: it
is reached as deploy reaches it (--registry-via). With -o json, one name
prints an object, several an array.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			// Opened first: when the registry cannot be reached, nothing is
			// removed.
			ep, err := connectRemove(cmd, &rm, kube, &via)
			if err != nil {
				return err
			}
			defer ep.Close()
			progress, done := cli.NewProgress(cmd)
			rm.Progress = progress
			results, err := rm.Run(cmd.Context(), args)
			done()
			if err != nil {
				return tunnelCause(err, ep)
			}
			return printRemoved(cmd.OutOrStdout(), output, results, ep)
		},
	}
	kube.register(cmd)
	output.Register(cmd)
	cmd.Flags().StringVarP(&rm.Namespace, "namespace", "n", cluster.DefaultNamespace, "ferry's namespace")
	cmd.Flags().DurationVar(&rm.Timeout, "timeout", deploy.DefaultTimeout, "how long each uninstall may take")
	via.register(cmd, reach.Auto)
	return cmd
}

// connectRemove gives rm its clients and its way to the registry (as
// deploy reaches it), and returns that way.
func connectRemove(cmd *cobra.Command, rm *deploy.Remove, kube kubeFlags, via *viaFlag) (*reach.Endpoint, error) {
	cs, cfg, err := kube.clientConfig()
	if err != nil {
		return nil, err
	}
	ep, err := via.open(cmd, cs, cfg, rm.Namespace, "", "")
	if err != nil {
		return nil, err
	}
	pc, err := packageClient(cfg)
	if err != nil {
		ep.Close()
		return nil, err
	}
	rm.Client, rm.Packages, rm.Kube, rm.Registry = cs, pc, kube.getter(), ep.Host
	return ep, nil
}

// printRemoved shows what remove did: with -o json, one object for one
// name, else an array.
func printRemoved(w io.Writer, output cli.OutputFlag, results []*rollout.UninstallResult, ep *reach.Endpoint) error {
	if output.JSON() {
		type removed struct {
			*rollout.UninstallResult
			RegistryVia *reach.Endpoint `json:"registryVia"`
		}
		out := make([]removed, len(results))
		for i, res := range results {
			out[i] = removed{res, ep}
		}
		if len(out) == 1 {
			return cli.WriteJSON(w, out[0])
		}
		return cli.WriteJSON(w, out)
	}
	for _, res := range results {
		fmt.Fprintf(w, "removed %s %s: %d releases, %d objects, %d images (%d kept for other packages); registry storage %s → %s\n",
			res.Name, res.Version, len(res.Releases), len(res.Objects), len(res.Images), len(res.Kept), cli.HumanBytes(res.Storage.Before), cli.HumanBytes(res.Storage.After))
	}
	fmt.Fprintf(w, "registry via %s\n", ep)
	return nil
}

// tunnelCause adds what the tunnel last reported to an error that a broken
// connection to the registry caused: through a tunnel, the client only sees
// its connection closed.
func tunnelCause(err error, ep *reach.Endpoint) error {
	if terr := ep.Err(); terr != nil && reach.Transient(err) {
		return fmt.Errorf("%w (the tunnel to the registry: %v)", err, terr)
	}
	return err
}
