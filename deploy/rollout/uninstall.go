package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// UninstallOptions configure Uninstall.
type UninstallOptions struct {
	// Namespace is ferry's namespace; cluster.DefaultNamespace if empty.
	Namespace string
	// Kube reaches the cluster (Helm, deletes, exec into the registry pod).
	Kube genericclioptions.RESTClientGetter
	// Timeout bounds each wait; DefaultTimeout if 0.
	Timeout time.Duration
	// Registry is where this process reaches the in-cluster registry
	// (host:port, e.g. a tunnel's local address); the registry's address on
	// the nodes if empty.
	Registry string
	// Progress, if set, receives progress reports.
	Progress artifact.ProgressFunc
	// DeferGC leaves the registry's garbage collection to the caller, who
	// runs CollectGarbage once for a batch of removals (the Package
	// controller does); UninstallResult.Storage is then zero.
	DeferGC bool
}

// UninstallResult tells what Uninstall did.
type UninstallResult struct {
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Releases []Release `json:"releases"`
	Objects  []Object  `json:"objects"`
	// Images are the images deleted from the registry, as repository@digest;
	// Kept those another deployed package still uses.
	Images []string `json:"images"`
	Kept   []string `json:"kept"`
	// Repositories are the git repositories' artifacts deleted, as
	// repository@digest (untagged, so only their deletion frees them).
	Repositories []string `json:"repositories,omitempty"`
	// CRDs are the CustomResourceDefinitions deleted: those the package's
	// releases created from their charts' crds/ folders, which Helm's
	// uninstall leaves. KeptCRDs, as "name: reason", those kept because
	// custom resources of theirs are left (another package's chart
	// carrying one keeps it silently).
	CRDs     []string `json:"crds,omitempty"`
	KeptCRDs []string `json:"keptCRDs,omitempty"`
	// PullSecrets are the namespaces whose copy of the registry pull secret
	// was deleted: those the package installed into and no other deployed
	// package does.
	PullSecrets []string `json:"pullSecrets,omitempty"`
	// Storage is the registry's storage before and after garbage collection.
	Storage Storage `json:"storage"`
}

// Storage is what the in-cluster registry's garbage collection reports
// (`ferry-registry gc` prints registry.GCResult as JSON): its storage's
// bytes before and after. Its own type, so that rollout does not link the
// registry server.
type Storage struct {
	Before int64 `json:"before"`
	After  int64 `json:"after"`
}

// ErrNotDeployed means Uninstall found no record of the package.
var ErrNotDeployed = errors.New("not deployed")

// Uninstall undoes Apply of package name: it uninstalls its Helm releases,
// deletes the objects of its manifests, the CRDs its releases created from
// their charts' crds/ folders (unless another package's chart carries them
// or custom resources of theirs are left), deletes its images from the
// in-cluster registry unless another deployed package uses them, and the
// package itself, forgets the record, then garbage-collects the registry's
// storage (in a registry pod) in read-only maintenance mode, during which
// every replica keeps serving pulls.
func Uninstall(ctx context.Context, cs kubernetes.Interface, name string, opts UninstallOptions) (*UninstallResult, error) {
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Kube == nil {
		return nil, errors.New("remove: no kubeconfig (UninstallOptions.Kube)")
	}
	st := &State{Client: cs, Namespace: opts.Namespace}
	recs, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(recs, func(r *Record) bool { return r.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("package %s: %w", name, ErrNotDeployed)
	}
	rec := recs[i]
	others := slices.Delete(recs, i, i+1)
	res := &UninstallResult{Name: rec.Name, Version: rec.Version, Releases: rec.Releases, Objects: rec.Objects, Images: []string{}, Kept: []string{}}
	progress := func(item string) {
		if opts.Progress != nil {
			opts.Progress(artifact.Progress{Phase: "remove", Item: item})
		}
	}

	for _, r := range slices.Backward(rec.Releases) {
		if err := uninstallRelease(ctx, opts.Kube, r, opts.Timeout); err != nil {
			return nil, err
		}
		progress("uninstalled release " + r.String())
	}
	if len(rec.Objects) > 0 {
		a, err := newApplier(opts.Kube, nil, nil, opts.Timeout)
		if err != nil {
			return nil, err
		}
		for _, o := range slices.Backward(rec.Objects) {
			if err := a.deleteObject(ctx, o); err != nil {
				return nil, err
			}
			progress("deleted " + o.String())
		}
	}

	if names := removableCRDs(rec, others); len(names) > 0 {
		cfg, err := opts.Kube.ToRESTConfig()
		if err != nil {
			return nil, err
		}
		ext, err := apiextensionsclient.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		res.CRDs, res.KeptCRDs, err = crdRemover{ext: ext, dyn: dyn, timeout: opts.Timeout}.remove(ctx, names)
		for _, n := range res.CRDs {
			progress("deleted CRD " + n)
		}
		if err != nil {
			return nil, err
		}
	}

	if res.PullSecrets, err = removePullSecrets(ctx, cs, opts.Namespace, rec, others); err != nil {
		return nil, err
	}
	for _, ns := range res.PullSecrets {
		progress("deleted pull secret " + ns + "/" + cluster.PullSecretName)
	}

	host, cred, err := RegistryAccess(ctx, cs, opts.Namespace)
	if err != nil {
		return nil, err
	}
	if opts.Registry != "" {
		host = opts.Registry
	}
	ro := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred), Client: reach.RegistryClient()}
	reg := &registryCleaner{host: host, remote: ro}
	used, err := reg.usedBy(ctx, others)
	if err != nil {
		return nil, err
	}
	refs, err := ImageRefs(rec.Config)
	if err != nil {
		return nil, err
	}
	for _, set := range []struct {
		what string
		refs []string
		done *[]string
	}{{"git repository", repositoryRefs(rec.Config), &res.Repositories}, {"image", append(refs, rec.Earlier...), &res.Images}} {
		for _, ref := range set.refs {
			if used[ref] {
				res.Kept = append(res.Kept, ref)
				continue
			}
			path, d, _ := strings.Cut(ref, "@")
			if err := reg.deleteGraph(ctx, path, digest.Digest(d), used); err != nil {
				return nil, err
			}
			*set.done = append(*set.done, ref)
			progress("deleted " + set.what + " " + ref)
		}
	}
	// The package's own repository holds every version's whole graph, and
	// their signatures.
	if err := reg.deleteRepository(ctx, rec.Name); err != nil {
		return nil, err
	}
	if err := st.Delete(ctx, rec.Name); err != nil {
		return nil, err
	}
	if opts.DeferGC {
		return res, nil
	}
	if res.Storage, err = collectGarbage(ctx, cs, host, opts); err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("registry storage %d → %d bytes", res.Storage.Before, res.Storage.After))
	return res, nil
}

// CollectGarbage garbage-collects the in-cluster registry's storage as
// Uninstall does after a removal (opts.Namespace, Kube, Timeout and Registry
// count): once for any number of removals made with DeferGC, in read-only
// maintenance mode as Uninstall's own (pulls go on, pushes wait).
func CollectGarbage(ctx context.Context, cs kubernetes.Interface, opts UninstallOptions) (Storage, error) {
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Kube == nil {
		return Storage{}, errors.New("garbage collection: no kubeconfig (UninstallOptions.Kube)")
	}
	host := opts.Registry
	if host == "" {
		h, _, err := RegistryAccess(ctx, cs, opts.Namespace)
		if err != nil {
			return Storage{}, err
		}
		host = h
	}
	return collectGarbage(ctx, cs, host, opts)
}

// removePullSecrets deletes ferry's copies of the registry pull secret
// (cluster.PullSecretName, labelled as ferry's: deploy and the agent make
// them) from the namespaces rec's releases and objects are in that no
// release or object of another package is in, never from ferry's own
// namespace ferryNS. It returns those namespaces. A Pod the agent admits
// there later gets a copy again.
func removePullSecrets(ctx context.Context, cs kubernetes.Interface, ferryNS string, rec *Record, others []*Record) ([]string, error) {
	used := map[string]bool{ferryNS: true, "": true}
	for _, r := range others {
		for ns := range namespaces(r) {
			used[ns] = true
		}
	}
	var out []string
	for ns := range namespaces(rec) {
		if used[ns] {
			continue
		}
		secrets := cs.CoreV1().Secrets(ns)
		s, err := secrets.Get(ctx, cluster.PullSecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("pull secret of namespace %s: %w", ns, err)
		}
		if s.Labels[cluster.LabelManagedBy] != cluster.ManagedBy {
			continue // someone's own Secret of that name
		}
		err = secrets.Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return out, fmt.Errorf("delete pull secret of namespace %s: %w", ns, err)
		}
		out = append(out, ns)
	}
	slices.Sort(out)
	return out, nil
}

// namespaces are those the releases and objects of rec are in.
func namespaces(rec *Record) map[string]bool {
	out := map[string]bool{}
	for _, r := range rec.Releases {
		out[r.Namespace] = true
	}
	for _, o := range rec.Objects {
		if o.Namespace != "" {
			out[o.Namespace] = true
		}
	}
	return out
}

// registryCleaner deletes manifests from the in-cluster registry.
type registryCleaner struct {
	host   string
	remote artifact.RemoteOptions
}

func (c *registryCleaner) repo(path string) (*remote.Repository, error) {
	return c.remote.Repository(c.host + "/" + path)
}

// usedBy gives every repository@digest the images of recs need: each
// image's manifest or index, and an index's manifests.
func (c *registryCleaner) usedBy(ctx context.Context, recs []*Record) (map[string]bool, error) {
	used := map[string]bool{}
	for _, r := range recs {
		for _, ref := range repositoryRefs(r.Config) {
			used[ref] = true
		}
		for _, comp := range r.Config.Components {
			for _, img := range comp.Images {
				path, _, err := artifact.ImagePath(img.Ref)
				if err != nil {
					return nil, err
				}
				used[path+"@"+img.Digest.String()] = true
				if img.MediaType != ocispec.MediaTypeImageIndex && img.MediaType != "application/vnd.docker.distribution.manifest.list.v2+json" {
					continue
				}
				repo, err := c.repo(path)
				if err != nil {
					return nil, err
				}
				_, data, err := oras.FetchBytes(ctx, repo, img.Digest.String(), oras.DefaultFetchBytesOptions)
				if err != nil {
					return nil, fmt.Errorf("image %s of package %s: %w", img.Ref, r.Name, err)
				}
				var idx ocispec.Index
				if err := json.Unmarshal(data, &idx); err != nil {
					return nil, fmt.Errorf("image %s of package %s: %w", img.Ref, r.Name, err)
				}
				for _, m := range idx.Manifests {
					used[path+"@"+m.Digest.String()] = true
				}
			}
		}
	}
	return used, nil
}

// deleteGraph deletes the manifest or index d of repository path, and the
// manifests an index holds (those not in keep), children first. One
// already gone is fine.
func (c *registryCleaner) deleteGraph(ctx context.Context, path string, d digest.Digest, keep map[string]bool) error {
	repo, err := c.repo(path)
	if err != nil {
		return err
	}
	desc, data, err := oras.FetchBytes(ctx, repo, d.String(), oras.DefaultFetchBytesOptions)
	if errors.Is(err, errdef.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s@%s: %w", path, d, err)
	}
	var idx ocispec.Index
	if json.Unmarshal(data, &idx) == nil && idx.Manifests != nil {
		for _, m := range idx.Manifests {
			if keep[path+"@"+m.Digest.String()] {
				continue
			}
			if err := c.deleteGraph(ctx, path, m.Digest, keep); err != nil {
				return err
			}
		}
	}
	if err := repo.Delete(ctx, desc); err != nil && !errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("delete %s@%s: %w", path, d, err)
	}
	return nil
}

// deleteRepository deletes every tagged manifest of repository path, and
// what they hold.
func (c *registryCleaner) deleteRepository(ctx context.Context, path string) error {
	repo, err := c.repo(path)
	if err != nil {
		return err
	}
	var tags []string
	err = artifact.ListTags(ctx, repo, func(page []string) error {
		tags = append(tags, page...)
		return nil
	})
	if errors.Is(err, artifact.ErrListLimit) {
		return err // names the repository
	}
	if err != nil && !errors.Is(err, errdef.ErrNotFound) {
		return fmt.Errorf("list tags of %s: %w", path, err)
	}
	for _, tag := range tags {
		desc, err := repo.Resolve(ctx, tag)
		if errors.Is(err, errdef.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("resolve %s:%s: %w", path, tag, err)
		}
		if err := c.deleteGraph(ctx, path, desc.Digest, nil); err != nil {
			return err
		}
	}
	return nil
}

// collectGarbage runs `ferry-registry gc` in one registry pod: it puts the
// storage in read-only maintenance mode, which every replica follows (pulls
// go on, pushes wait), collects once, and returns it to read-write; the
// replicas then start afresh, without cached descriptors of what was swept.
// No pod restarts.
func collectGarbage(ctx context.Context, cs kubernetes.Interface, host string, opts UninstallOptions) (Storage, error) {
	var res Storage
	cfg, err := opts.Kube.ToRESTConfig()
	if err != nil {
		return res, err
	}
	if err := registryExec(ctx, cs, cfg, opts.Namespace, &res, "gc"); err != nil {
		return res, err
	}
	if err := reach.WaitRegistry(ctx, host, opts.Timeout); err != nil {
		return res, fmt.Errorf("registry after garbage collection: %w", err)
	}
	return res, nil
}

// Usage is the in-cluster registry's storage, and what a garbage
// collection would free.
type Usage struct {
	// Bytes is the size of the storage's objects.
	Bytes int64 `json:"bytes"`
	// Freeable is the size of the blobs no manifest references, which
	// garbage collection (ferry remove, ferry registry gc) would delete;
	// Blobs counts them.
	Freeable int64 `json:"freeable"`
	Blobs    int   `json:"blobs"`
}

// RegistryUsage measures the in-cluster registry's storage and what a
// garbage collection would free, in one registry Pod (`ferry-registry gc
// --dry-run`: distribution's own mark and sweep, made to delete nothing).
// Nothing changes; pushes go on meanwhile. The caller needs pods/exec in
// ferry's namespace ns.
func RegistryUsage(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, ns string) (Usage, error) {
	var res struct {
		Before   int64 `json:"before"`
		Freeable int64 `json:"freeable"`
		Blobs    int   `json:"blobs"`
	}
	if err := registryExec(ctx, cs, cfg, ns, &res, "gc", "--dry-run"); err != nil {
		return Usage{}, err
	}
	return Usage{Bytes: res.Before, Freeable: res.Freeable, Blobs: res.Blobs}, nil
}

// registryExec runs `ferry-registry ARGS --root …` in a running registry
// Pod of namespace ns and decodes the JSON line it prints into v.
func registryExec(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, ns string, v any, args ...string) error {
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("registry deployment: %w", err)
	}
	sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels).String()
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return fmt.Errorf("registry pod: %w", err)
	}
	var pod *corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			pod = p
		}
	}
	if pod == nil {
		return fmt.Errorf("registry pod: none running in namespace %s", ns)
	}
	c := pod.Spec.Containers[0]
	cmd := append([]string{cluster.RegistryBinaryPath}, args...)
	cmd = append(cmd, "--root", cluster.RegistryRoot)
	out, err := execPod(ctx, cs, cfg, pod, c.Name, cmd)
	if err != nil {
		return fmt.Errorf("%s in pod %s: %w", strings.Join(args, " "), pod.Name, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s in pod %s: %q: %w", strings.Join(args, " "), pod.Name, out, err)
	}
	return nil
}

// execPod runs cmd in a container and returns its standard output.
func execPod(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, pod *corev1.Pod, container string, cmd []string) ([]byte, error) {
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		return nil, err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return true })
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		if msg := bytes.TrimSpace(stderr.Bytes()); len(msg) > 0 {
			return nil, fmt.Errorf("%w: %s", err, msg)
		}
		return nil, err
	}
	return stdout.Bytes(), nil
}

// repositoryRefs lists where deploy put the git repositories of cfg, as
// repository@digest.
func repositoryRefs(cfg *artifact.Config) []string {
	var out []string
	for _, c := range cfg.Components {
		for _, g := range c.Repositories {
			out = append(out, g.Path+"@"+g.Digest.String())
		}
	}
	return out
}
