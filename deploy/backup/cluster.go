package backup

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// ownPrefix is where ferry init puts ferry's own images (the agent's,
// install.Repository): a cluster restored into has its own from its init,
// so a backup of everything leaves them out (--repository names them).
const ownPrefix = "ferry/"

// selection decides what a backup covers: the repositories (match), the
// Packages and the keys they name.
func selection(ctx context.Context, src Source, opts Options) (func(string) bool, []Package, []Key, error) {
	var list v1alpha1.PackageList
	if src.Client != nil {
		if err := src.Client.List(ctx, &list, client.InNamespace(src.Namespace)); err != nil && !meta.IsNoMatchError(err) {
			return nil, nil, nil, fmt.Errorf("list the Packages: %w", err)
		}
	}
	all := len(opts.Packages) == 0 && len(opts.Repositories) == 0
	repos := map[string]bool{}
	for _, r := range opts.Repositories {
		repos[r] = true
	}
	byName := map[string]*v1alpha1.Package{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	var chosen []*v1alpha1.Package
	for _, name := range opts.Packages {
		p, ok := byName[name]
		if !ok {
			return nil, nil, nil, fmt.Errorf("no Package %s in namespace %s", name, src.Namespace)
		}
		named, err := packageRepositories(ctx, src, p)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, r := range named {
			repos[r] = true
		}
	}
	for i := range list.Items {
		p := &list.Items[i]
		if all || repos[p.Spec.Repository] {
			chosen = append(chosen, p)
		}
	}
	sort.Slice(chosen, func(i, j int) bool { return chosen[i].Name < chosen[j].Name })
	var pkgs []Package
	var keys []Key
	seenKey := map[string]bool{}
	for _, p := range chosen {
		pkgs = append(pkgs, Package{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels, Spec: *p.Spec.DeepCopy()})
		for _, k := range p.Spec.Keys {
			kind := k.Kind
			if kind == "" {
				kind = "Secret"
			}
			id := kind + "/" + k.Name
			if seenKey[id] {
				continue
			}
			seenKey[id] = true
			key, err := readKey(ctx, src.Client, p.Namespace, kind, k.Name)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("Package %s: %w", p.Name, err)
			}
			keys = append(keys, key)
		}
	}
	match := func(r string) bool {
		if all {
			return !strings.HasPrefix(r, ownPrefix)
		}
		return inSelection(repos, r)
	}
	return match, pkgs, keys, nil
}

// packageRepositories are the repositories a Package's package uses: its
// own, and those its ferry.json names (images under their paths, git
// repositories under theirs), read from the registry at the digest the
// Package installs.
func packageRepositories(ctx context.Context, src Source, p *v1alpha1.Package) ([]string, error) {
	ref := p.Spec.Digest
	if ref == "" {
		ref = p.Status.Digest
	}
	if ref == "" {
		ref = p.Spec.Tag
	}
	repo, err := src.Registry.Repository(ctx, p.Spec.Repository)
	if err != nil {
		return nil, err
	}
	cfg, _, err := artifact.ReadConfig(ctx, repo, ref)
	if err != nil {
		return nil, fmt.Errorf("Package %s: read its package %s@%s: %w", p.Name, p.Spec.Repository, ref, err)
	}
	out := []string{p.Spec.Repository}
	for _, c := range cfg.Components {
		for _, img := range c.Images {
			path, _, err := artifact.ImagePath(img.Ref)
			if err != nil {
				return nil, err
			}
			out = append(out, path)
		}
		for _, g := range c.Repositories {
			out = append(out, g.Path)
		}
	}
	return out, nil
}

// readKey reads the Secret or ConfigMap a Package names a key in: its
// data, and its labels (the trusted-key label among them).
func readKey(ctx context.Context, c client.Client, ns, kind, name string) (Key, error) {
	k := Key{Kind: kind, Name: name, Namespace: ns, Data: map[string]string{}}
	key := client.ObjectKey{Namespace: ns, Name: name}
	switch kind {
	case "Secret":
		var s corev1.Secret
		if err := c.Get(ctx, key, &s); err != nil {
			return k, fmt.Errorf("read key Secret %s/%s: %w", ns, name, err)
		}
		for n, v := range s.Data {
			k.Data[n] = string(v)
		}
		k.Labels = s.Labels
	case "ConfigMap":
		var m corev1.ConfigMap
		if err := c.Get(ctx, key, &m); err != nil {
			return k, fmt.Errorf("read key ConfigMap %s/%s: %w", ns, name, err)
		}
		for n, v := range m.Data {
			k.Data[n] = v
		}
		k.Labels = m.Labels
	default:
		return k, fmt.Errorf("key %s %s: kind is not Secret or ConfigMap", kind, name)
	}
	return k, nil
}
