package rollout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/agent"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// DefaultTimeout bounds the wait for each chart's and bundle's resources
// (ApplyOptions.Timeout) and each wait of Uninstall.
const DefaultTimeout = 5 * time.Minute

// PhaseInstall reports a chart installed or a manifest bundle applied.
const PhaseInstall = "install"

// checkKube refuses to go on without a kubeconfig when a selected
// component has charts or manifests.
func checkKube(cfg *artifact.Config, names []string, kube genericclioptions.RESTClientGetter) error {
	comps, err := SelectComponents(cfg, names)
	if err != nil {
		return err
	}
	if kube == nil && slices.ContainsFunc(comps, func(c artifact.Component) bool { return len(c.Charts)+len(c.Manifests) > 0 }) {
		return errors.New("deploy: charts and manifests need a kubeconfig (ApplyOptions.Kube)")
	}
	return nil
}

// ApplyOptions configure Apply.
type ApplyOptions struct {
	// Namespace is ferry's namespace; cluster.DefaultNamespace if empty.
	Namespace string
	// Kube reaches the cluster for Helm and server-side apply.
	Kube genericclioptions.RESTClientGetter
	// Components selects components by name (required ones always come
	// along); all of them when empty.
	Components []string
	// Values are given to every chart; ChartValues (by chart name) go over
	// them for one chart.
	Values      map[string]any
	ChartValues map[string]map[string]any
	// Timeout bounds the wait for each chart's and bundle's resources;
	// DefaultTimeout if 0.
	Timeout time.Duration
	// Registry is where this process reaches the in-cluster registry
	// (host:port); the registry's address on the nodes if empty.
	Registry string
	// BytesPushed is recorded as what the deploy pushed.
	BytesPushed int64
	// Render, if set, renders each chart's release before Helm installs
	// or upgrades it in this process, where its cost is bounded
	// (chartrender.Limited: in a child process under limits); a chart it
	// refuses fails the install, naming the release and the limit. Nil:
	// charts are only rendered by Helm, here.
	Render ReleaseRenderer
	// Progress, if set, receives progress reports.
	Progress artifact.ProgressFunc
}

// Apply rolls the package cfg out, whose root is in the in-cluster
// registry (a deploy pushed it there) and was verified by the caller: installs or
// upgrades the charts of the selected components with Helm (waiting for
// readiness, rolled back on failure; a release left pending by an
// interrupted install is finished or undone first, and one whose objects
// were deleted by hand is upgraded again) and applies their manifests,
// every image rewritten to the in-cluster registry by digest; removes what
// an earlier deploy of the package installed that this one does not; and
// records the package for list, remove and the agent. Run again on what is
// installed, it changes nothing.
//
// When a chart or bundle fails, the error says which and why; the record
// then keeps the earlier version, plus whatever this install did, so that
// remove finds it.
func Apply(ctx context.Context, cs kubernetes.Interface, cfg *artifact.Config, root digest.Digest, opts ApplyOptions) (*Record, error) {
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	comps, err := SelectComponents(cfg, opts.Components)
	if err != nil {
		return nil, err
	}
	if err := checkKube(cfg, opts.Components, opts.Kube); err != nil {
		return nil, err
	}
	host, push, cred, err := registryFor(ctx, cs, opts.Namespace, opts.Registry)
	if err != nil {
		return nil, err
	}
	st := &State{Client: cs, Namespace: opts.Namespace}
	prev, err := st.Get(ctx, cfg.Name)
	if err != nil {
		return nil, err
	}
	if opts.Values == nil {
		opts.Values = map[string]any{}
	}
	d := &deployer{cs: cs, opts: opts, host: host, push: push, remote: artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(push, cred), Client: reach.RegistryClient()}, cfg: cfg, prev: prev, ensured: map[string]bool{}}
	rec := &Record{Name: cfg.Name, Version: cfg.Version, Root: root, Config: cfg, BytesPushed: opts.BytesPushed}
	for _, c := range comps {
		rec.Components = append(rec.Components, c.Name)
	}
	if rec.Earlier, err = earlierImages(prev, cfg); err != nil {
		return nil, err
	}
	if prev == nil {
		// Helm does not post-render hooks: their Pods get the package's
		// images from the agent, which knows the recorded packages' only.
		// A first install is recorded before it starts, without releases,
		// as a failed one is.
		if err := st.Save(ctx, d.failed(rec)); err != nil {
			return nil, err
		}
	}
	if err := d.install(ctx, comps, rec); err != nil {
		if serr := st.Save(ctx, d.failed(rec)); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	if err := d.prune(ctx, rec); err != nil {
		return nil, err
	}
	if err := st.Save(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// earlierImages are the images of prev, and those it kept from versions
// before it, that cfg does not have, as repository@digest.
func earlierImages(prev *Record, cfg *artifact.Config) ([]string, error) {
	if prev == nil {
		return nil, nil
	}
	now, err := ImageRefs(cfg)
	if err != nil {
		return nil, err
	}
	old, err := ImageRefs(prev.Config)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, ref := range append(prev.Earlier, old...) {
		if !slices.Contains(now, ref) && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out, nil
}

// ImageRefs lists the images of a package as the in-cluster registry holds
// them: repository@digest.
func ImageRefs(cfg *artifact.Config) ([]string, error) {
	var out []string
	for _, c := range cfg.Components {
		for _, img := range c.Images {
			path, _, err := artifact.ImagePath(img.Ref)
			if err != nil {
				return nil, err
			}
			if ref := path + "@" + img.Digest.String(); !slices.Contains(out, ref) {
				out = append(out, ref)
			}
		}
	}
	return out, nil
}

// SelectComponents returns the components of cfg named, and the required
// ones; all of them when names is empty. A name cfg has no component of is
// an error that lists those it has.
func SelectComponents(cfg *artifact.Config, names []string) ([]artifact.Component, error) {
	if len(names) == 0 {
		return cfg.Components, nil
	}
	var all []string
	for _, c := range cfg.Components {
		all = append(all, c.Name)
	}
	for _, n := range names {
		if !slices.Contains(all, n) {
			return nil, fmt.Errorf("package %s has no component %q (it has %s)", cfg.Name, n, strings.Join(all, ", "))
		}
	}
	var out []artifact.Component
	for _, c := range cfg.Components {
		if c.Required || slices.Contains(names, c.Name) {
			out = append(out, c)
		}
	}
	return out, nil
}

// deployer installs the charts and manifests of one package.
type deployer struct {
	cs      kubernetes.Interface
	opts    ApplyOptions
	host    string // the registry on the nodes, for Pods
	push    string // the registry for this process
	remote  artifact.RemoteOptions
	cfg     *artifact.Config
	prev    *Record
	ensured map[string]bool
	applier *applier
}

func (d *deployer) progress(item string) {
	if d.opts.Progress != nil {
		d.opts.Progress(artifact.Progress{Phase: PhaseInstall, Item: item})
	}
}

// install installs every chart, then applies every manifest bundle, of
// comps, in order, adding what it did to rec.
func (d *deployer) install(ctx context.Context, comps []artifact.Component, rec *Record) error {
	repo, err := d.remote.Repository(d.push + "/" + d.cfg.Name)
	if err != nil {
		return err
	}
	images := agent.Images{}
	if err := images.Add(d.cfg); err != nil {
		return err
	}
	render := &imageRenderer{rw: &agent.Rewriter{Registry: d.host, Images: images}, pullSecret: cluster.PullSecretName}
	id, err := jsonDigest(images)
	if err != nil {
		return err
	}
	for _, c := range comps {
		for _, ch := range c.Charts {
			archive, err := fetchChart(ctx, repo, ch)
			if err != nil {
				return err
			}
			values := chartutil.CoalesceTables(maps.Clone(d.opts.ChartValues[ch.Name]), d.opts.Values)
			vd, err := jsonDigest(values)
			if err != nil {
				return err
			}
			ns, name := ch.Release()
			spec := releaseSpec{archive: archive, values: values, rec: Release{
				Namespace: ns, Name: name, Chart: ch.Name + "-" + ch.Version, Digest: ch.Digest, Values: vd, Images: id,
			}}
			if err := d.ensureNamespace(ctx, ns); err != nil {
				return err
			}
			hc, err := helmConfig(d.opts.Kube, ns)
			if err != nil {
				return err
			}
			done, err := installRelease(ctx, hc, spec, d.opts.Render, render, d.prevRelease(spec.rec), d.opts.Timeout)
			if err != nil {
				return fmt.Errorf("component %s: %w", c.Name, err)
			}
			rec.Releases = append(rec.Releases, done)
			d.progress(fmt.Sprintf("release %s (%s, revision %d)", done, done.Chart, done.Revision))
		}
		for _, m := range c.Manifests {
			if d.applier == nil {
				if d.applier, err = newApplier(d.opts.Kube, render, d.ensureNamespace, d.opts.Timeout); err != nil {
					return err
				}
			}
			data, err := fetchManifests(ctx, repo, m)
			if err != nil {
				return err
			}
			objs, err := d.applier.apply(ctx, m, data)
			rec.Objects = append(rec.Objects, objs...)
			if err != nil {
				return fmt.Errorf("component %s: %w", c.Name, err)
			}
			d.progress(fmt.Sprintf("manifests %s (%d objects)", m.Name, len(objs)))
		}
	}
	return nil
}

func (d *deployer) prevRelease(r Release) *Release {
	if d.prev == nil {
		return nil
	}
	for i, p := range d.prev.Releases {
		if p.Namespace == r.Namespace && p.Name == r.Name {
			return &d.prev.Releases[i]
		}
	}
	return nil
}

// prune removes what the previous deploy of the package installed and this
// one did not: releases of charts (or components) no longer there, objects
// no longer in its manifests.
func (d *deployer) prune(ctx context.Context, rec *Record) error {
	if d.prev == nil {
		return nil
	}
	for _, p := range d.prev.Releases {
		if !slices.ContainsFunc(rec.Releases, func(r Release) bool { return r.String() == p.String() }) {
			if err := uninstallRelease(ctx, d.opts.Kube, p, d.opts.Timeout); err != nil {
				return err
			}
			d.progress("uninstalled release " + p.String())
		}
	}
	var gone []Object
	for _, o := range d.prev.Objects {
		if !slices.Contains(rec.Objects, o) {
			gone = append(gone, o)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if d.applier == nil {
		var err error
		if d.applier, err = newApplier(d.opts.Kube, nil, d.ensureNamespace, d.opts.Timeout); err != nil {
			return err
		}
	}
	for _, o := range gone {
		if err := d.applier.deleteObject(ctx, o); err != nil {
			return err
		}
		d.progress("deleted " + o.String())
	}
	return nil
}

// failed is the record to keep after a failed deploy: the earlier one
// (what mostly still runs), plus whatever this deploy installed, so that
// remove finds it.
func (d *deployer) failed(rec *Record) *Record {
	out := rec
	if d.prev != nil {
		cp := *d.prev
		out = &cp
		out.Releases = slices.Clone(d.prev.Releases)
		out.Objects = slices.Clone(d.prev.Objects)
	} else {
		cp := *rec
		out = &cp
		out.Releases, out.Objects = nil, nil
	}
	for _, r := range rec.Releases {
		if !slices.ContainsFunc(out.Releases, func(p Release) bool { return p.String() == r.String() }) {
			out.Releases = append(out.Releases, r)
		}
	}
	for _, o := range rec.Objects {
		if !slices.Contains(out.Objects, o) {
			out.Objects = append(out.Objects, o)
		}
	}
	return out
}

// ensureNamespace creates namespace ns when it is missing and gives it the
// in-cluster registry's pull secret, which the rewritten pods name.
func (d *deployer) ensureNamespace(ctx context.Context, ns string) error {
	if d.ensured[ns] {
		return nil
	}
	if err := EnsurePullSecret(ctx, d.cs, d.opts.Namespace, ns); err != nil {
		return err
	}
	d.ensured[ns] = true
	return nil
}

// EnsurePullSecret creates namespace ns if it is missing and copies the
// in-cluster registry's pull secret from ferry's namespace into it, as the
// agent does for the Pods it admits.
func EnsurePullSecret(ctx context.Context, cs kubernetes.Interface, ferryNS, ns string) error {
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create namespace %s: %w", ns, err)
		}
	} else if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	ps := &agent.PullSecrets{Client: cs, Namespace: ferryNS, Name: cluster.PullSecretName}
	if err := ps.Ensure(ctx, ns); err != nil {
		return fmt.Errorf("registry pull secret: %w", cluster.NotSetUp(err))
	}
	return nil
}

// registryFor reads where the in-cluster registry is on the nodes (host)
// and its account; push is where this process reaches it: via, or host.
func registryFor(ctx context.Context, cs kubernetes.Interface, ns, via string) (host, push string, cred auth.Credential, err error) {
	host, cred, err = RegistryAccess(ctx, cs, ns)
	push = host
	if via != "" {
		push = via
	}
	return host, push, cred, err
}

// RegistryAccess reads where the in-cluster registry is (its address on
// the nodes) and its account.
func RegistryAccess(ctx context.Context, cs kubernetes.Interface, ns string) (string, auth.Credential, error) {
	state, account, err := cluster.ReadRegistry(ctx, cs.CoreV1().Secrets(ns))
	if err != nil {
		return "", auth.Credential{}, err
	}
	return state.Registry, auth.Credential{Username: account.Username, Password: account.Password}, nil
}
