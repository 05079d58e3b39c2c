// Package bomscan finds the SBOMs a cluster and a fleet run: a cluster's
// Packages, read from its in-cluster registry, with the Pods that run each
// image; the packages a fleet's centre holds on its release tracks, with
// the members that report running them. Scanning, the index and audits
// are package artifact/bomscan's.
package bomscan

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"oras.land/oras-go/v2/registry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// Bounds of what a cluster scan lists.
const (
	// MaxPods bounds the Pods listed to learn which run an image (50,000).
	MaxPods = 50_000
	// MaxNodes bounds the Nodes listed to learn a Pod's platform (5,000).
	MaxNodes = 5_000
	// pageSize is how many objects one list request asks for.
	pageSize = 500
)

// Cluster is a scanner of the SBOMs of the Packages in namespace ns (ferry's)
// of the cluster c reaches, read from its in-cluster registry reg, each
// located where it runs: "NS/PACKAGE" and "pod NS/NAME" for each Pod whose
// container image names the image's digest or one of its platform
// manifests (the agent rewrites images to registry/…@sha256:…), or whose
// status names one as its image ID. The index is kept in reg
// (bomscan.IndexRepository, tag bomscan.IndexTag).
func Cluster(c client.Client, ns string, reg registry.Registry) *bomscan.Scanner {
	return &bomscan.Scanner{
		Source: &clusterSource{c: c, ns: ns, reg: reg},
		Store:  &lazyStore{reg: reg, repo: bomscan.IndexRepository, pin: configMapPin{c: c, ns: ns}},
	}
}

type clusterSource struct {
	c   client.Client
	ns  string
	reg registry.Registry
}

func (s *clusterSource) SBOMs(ctx context.Context) ([]bomscan.SBOMRef, error) {
	pkgs, err := listPackages(ctx, s.c, s.ns)
	if meta.IsNoMatchError(err) {
		return nil, nil // no Package API: nothing deployed
	}
	if err != nil {
		return nil, err
	}
	pods, err := listPods(ctx, s.c)
	if err != nil {
		return nil, err
	}
	var refs []bomscan.SBOMRef
	for _, p := range pkgs {
		root := p.Status.Digest
		if root == "" {
			root = p.Spec.Digest
		}
		if root == "" {
			continue // not resolved yet
		}
		repo, err := s.reg.Repository(ctx, p.Spec.Repository)
		if err != nil {
			return nil, fmt.Errorf("Package %s/%s: %w", p.Namespace, p.Name, err)
		}
		where := p.Namespace + "/" + p.Name
		more, err := bomscan.PackageSBOMs(ctx, repo, root, func(img artifact.Image, sb artifact.SBOM) []string {
			return append([]string{where}, pods.running(img, sb)...)
		})
		if err != nil {
			return nil, fmt.Errorf("Package %s: %w", where, err)
		}
		if refs = append(refs, more...); len(refs) > bomscan.MaxSBOMs {
			return nil, fmt.Errorf("the Packages carry more than %d SBOMs", bomscan.MaxSBOMs)
		}
	}
	return refs, nil
}

// listPackages lists the Packages of namespace ns a page at a time,
// refusing more than bomscan.MaxPackages as soon as it sees them.
func listPackages(ctx context.Context, c client.Client, ns string) ([]v1alpha1.Package, error) {
	var out []v1alpha1.Package
	for cont := ""; ; {
		var pl v1alpha1.PackageList
		if err := c.List(ctx, &pl, client.InNamespace(ns), client.Limit(pageSize), client.Continue(cont)); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, err
			}
			return nil, fmt.Errorf("list Packages: %w", err)
		}
		if out = append(out, pl.Items...); len(out) > bomscan.MaxPackages {
			return nil, fmt.Errorf("more than %d Packages in namespace %s", bomscan.MaxPackages, ns)
		}
		if pl.Continue == "" {
			return out, nil
		}
		cont = pl.Continue
	}
}

// podIndex is which Pods name which digests, and the platform of each
// Pod's node.
type podIndex struct {
	byDigest map[digest.Digest][]podRef
}

type podRef struct {
	name     string // "pod ns/name"
	platform string // its node's os/arch, "" when not known
}

// running names the Pods that run platform sb.Platform of img.
func (p *podIndex) running(img artifact.Image, sb artifact.SBOM) []string {
	var out []string
	for _, r := range p.byDigest[sb.Subject] {
		out = append(out, r.name)
	}
	if img.Digest != sb.Subject {
		// A Pod naming the index runs the platform of its node.
		for _, r := range p.byDigest[img.Digest] {
			if r.platform == "" || strings.HasPrefix(sb.Platform+"/", r.platform+"/") {
				out = append(out, r.name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// listPods lists the cluster's Pods (at most MaxPods) by the digests their
// images name. The Nodes' platforms are read if the user may list them.
func listPods(ctx context.Context, c client.Client) (*podIndex, error) {
	nodes := map[string]string{}
	var nl corev1.NodeList
	for cont, n := "", 0; ; {
		if err := c.List(ctx, &nl, client.Limit(pageSize), client.Continue(cont)); err != nil {
			break // no right to list Nodes: platforms unknown
		}
		for _, node := range nl.Items {
			nodes[node.Name] = node.Status.NodeInfo.OperatingSystem + "/" + node.Status.NodeInfo.Architecture
		}
		if n += len(nl.Items); n > MaxNodes || nl.Continue == "" {
			break
		}
		cont = nl.Continue
	}
	idx := &podIndex{byDigest: map[digest.Digest][]podRef{}}
	var pl corev1.PodList
	for cont, n := "", 0; ; {
		if err := c.List(ctx, &pl, client.Limit(pageSize), client.Continue(cont)); err != nil {
			return nil, fmt.Errorf("list Pods: %w", err)
		}
		if n += len(pl.Items); n > MaxPods {
			return nil, fmt.Errorf("more than %d Pods", MaxPods)
		}
		for _, pod := range pl.Items {
			ref := podRef{name: "pod " + pod.Namespace + "/" + pod.Name, platform: nodes[pod.Spec.NodeName]}
			seen := map[digest.Digest]bool{}
			for _, d := range podDigests(&pod) {
				if !seen[d] {
					seen[d] = true
					idx.byDigest[d] = append(idx.byDigest[d], ref)
				}
			}
		}
		if pl.Continue == "" {
			return idx, nil
		}
		cont = pl.Continue
	}
}

// podDigests are the digests a Pod's container images and image IDs name.
func podDigests(pod *corev1.Pod) []digest.Digest {
	var ds []digest.Digest
	add := func(s string) {
		if i := strings.LastIndex(s, "sha256:"); i >= 0 {
			if d, err := digest.Parse(s[i:]); err == nil {
				ds = append(ds, d)
			}
		}
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			add(c.Image)
		}
	}
	for _, st := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, c := range st {
			add(c.ImageID)
		}
	}
	return ds
}

// lazyStore is a PinnedStore of repository repo in reg, opened when
// first used.
type lazyStore struct {
	reg  registry.Registry
	repo string
	pin  bomscan.Pin
	st   bomscan.Store
}

func (s *lazyStore) store(ctx context.Context) (bomscan.Store, error) {
	if s.st != nil {
		return s.st, nil
	}
	repo, err := s.reg.Repository(ctx, s.repo)
	if err != nil {
		return nil, err
	}
	s.st = bomscan.PinnedStore(repo, bomscan.IndexTag, s.pin)
	return s.st, nil
}

// configMapPin pins the index in the ConfigMap cluster.SBOMIndexName of
// namespace ns: only those who may write ferry's (or the centre's)
// namespace choose the index every search reads, not everyone who may
// push to the registry.
type configMapPin struct {
	c  client.Client
	ns string
}

func (p configMapPin) Get(ctx context.Context) (digest.Digest, error) {
	var cm corev1.ConfigMap
	err := p.c.Get(ctx, client.ObjectKey{Namespace: p.ns, Name: cluster.SBOMIndexName}, &cm)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("ConfigMap %s/%s: %w", p.ns, cluster.SBOMIndexName, err)
	}
	return digest.Digest(cm.Data[cluster.SBOMIndexKey]), nil
}

func (p configMapPin) Set(ctx context.Context, d digest.Digest) error {
	cm := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: cluster.SBOMIndexName}}
	data := map[string]string{cluster.SBOMIndexKey: d.String()}
	err := p.c.Get(ctx, client.ObjectKeyFromObject(&cm), &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm.Data = data
		err = p.c.Create(ctx, &cm)
	case err == nil:
		cm.Data = data
		err = p.c.Update(ctx, &cm)
	}
	if err != nil {
		return fmt.Errorf("ConfigMap %s/%s: %w", p.ns, cluster.SBOMIndexName, err)
	}
	return nil
}

func (s *lazyStore) Load(ctx context.Context) (*bom.Index, error) {
	st, err := s.store(ctx)
	if err != nil {
		return nil, err
	}
	return st.Load(ctx)
}

func (s *lazyStore) Save(ctx context.Context, idx *bom.Index) error {
	st, err := s.store(ctx)
	if err != nil {
		return err
	}
	return st.Save(ctx, idx)
}
