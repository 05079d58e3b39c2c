// Package agent is ferry's mutating admission webhook, run in the cluster
// by `ferry agent`: it rewrites every image of a Pod to the in-cluster
// registry, by the digest a deployed package recorded, so that a tag is
// never trusted in the cluster (Rewriter, Webhook, Cache, Serve); refuses
// an image whose signatures, as its package carried them into the
// registry, do not satisfy the signature policy the package declared for
// it (Verifier, fail closed); and copies the registry's pull secret into
// the Pod's namespace (PullSecrets). Install, run by `ferry init` once the
// registry is up, builds the agent's image from the ferry binary, pushes
// it to the registry and deploys it with its certificates, RBAC and
// webhook registration.
package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/imagesig"
)

// ErrUnknownImage means an image is in no deployed package.
var ErrUnknownImage = errors.New("image is in no deployed package")

// Images maps original image references, normalized (docker.io/library/
// nginx:1.27), to what deployed packages recorded for them: the stored
// digest the cluster pulls, and the original digest.
type Images map[string]artifact.Image

// Add records every image of a package's config.
func (m Images) Add(cfg *artifact.Config) error {
	for _, c := range cfg.Components {
		for _, img := range c.Images {
			key, err := normalize(img.Ref)
			if err != nil {
				return fmt.Errorf("package %s %s: %w", cfg.Name, cfg.Version, err)
			}
			m[key] = img
		}
	}
	return nil
}

// Policies maps the keys of Images to the signature policy the image's
// package declared for it (artifact.Image.Policy); nil when the package
// names a policy it does not declare, which the webhook refuses.
type Policies map[string]*imagesig.Policy

// Add records the policy of every image of a package's config that names
// one.
func (m Policies) Add(cfg *artifact.Config) error {
	for _, c := range cfg.Components {
		for _, img := range c.Images {
			if img.Policy == "" {
				continue
			}
			key, err := normalize(img.Ref)
			if err != nil {
				return fmt.Errorf("package %s %s: %w", cfg.Name, cfg.Version, err)
			}
			m[key] = nil
			for i := range cfg.ImagePolicies {
				if cfg.ImagePolicies[i].Name == img.Policy {
					m[key] = &cfg.ImagePolicies[i]
					break
				}
			}
		}
	}
	return nil
}

// normalize gives the canonical form of an image reference: registry host,
// full path, and the tag ("latest" when none) or digest.
func normalize(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %.80q: %w", ref, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// Rewriter turns image references into in-cluster ones.
type Rewriter struct {
	// Registry is the in-cluster registry host, e.g. 127.0.0.1:31999.
	Registry string
	// Images are the digests deployed packages recorded.
	Images Images
	// Policies are the signature policies of Images (see Check).
	Policies Policies
	// RequireKnown refuses images that are in no deployed package instead
	// of leaving them as they are.
	RequireKnown bool

	pathsOnce sync.Once
	paths     map[string][]string // registry path → keys of Images, sorted
}

// keysAt gives the keys of Images whose repository in the registry is
// path, sorted; the index is made on first use (Images do not change
// once a Rewriter is in use).
func (rw *Rewriter) keysAt(path string) []string {
	rw.pathsOnce.Do(func() {
		rw.paths = map[string][]string{}
		for k := range rw.Images {
			if named, err := reference.ParseNormalizedNamed(k); err == nil {
				p := reference.Path(named)
				rw.paths[p] = append(rw.paths[p], k)
			}
		}
		for _, keys := range rw.paths {
			slices.Sort(keys)
		}
	})
	return rw.paths[path]
}

// Rewrite returns the in-cluster reference for image:
// Registry/<original path>@<recorded digest>. An image already in the
// registry by digest is returned as it is (idempotent). An unknown image is
// returned unchanged, or an ErrUnknownImage with RequireKnown.
func (rw *Rewriter) Rewrite(image string) (string, error) {
	ref, _, known, err := rw.lookup(image)
	switch {
	case err != nil:
		return "", err
	case known:
		return ref, nil
	case rw.RequireKnown:
		return "", fmt.Errorf("%w: %s", ErrUnknownImage, image)
	}
	return image, nil
}

// lookup finds the in-cluster reference of image; known is false when no
// deployed package recorded it. key is the key of Images it resolved to,
// empty for an image already in the registry (see inRegistry).
func (rw *Rewriter) lookup(image string) (ref, key string, known bool, err error) {
	if rw.isRegistry(image) {
		return image, "", true, nil
	}
	key, err = normalize(image)
	if err != nil {
		return "", "", false, err
	}
	img, ok := rw.Images[key]
	d := img.Digest
	if !ok {
		// A reference by digest names its content: known when a package
		// recorded that digest (stored or original) for the repository.
		if named, err := reference.ParseNormalizedNamed(image); err == nil {
			if dg, isDigested := named.(reference.Digested); isDigested {
				key, ok = rw.byDigest(named.Name(), dg.Digest())
				d = rw.Images[key].Digest
			}
		}
	}
	if !ok {
		return "", "", false, nil
	}
	named, _ := reference.ParseNormalizedNamed(key)
	return rw.Registry + "/" + reference.Path(named) + "@" + d.String(), key, true, nil
}

// isRegistry says image is a reference into the registry by digest.
func (rw *Rewriter) isRegistry(image string) bool {
	return strings.HasPrefix(image, rw.Registry+"/") && strings.Contains(image, "@sha256:")
}

// inRegistry finds the keys of the images a reference into the registry
// by digest names, sorted: those of its repository whose stored digest,
// original digest or one of whose signed subjects (platform manifests)
// it is. Packages may record the same content under several references.
func (rw *Rewriter) inRegistry(image string) []string {
	path, d := registryPath(rw.Registry, image)
	var keys []string
	for _, k := range rw.keysAt(path) {
		img := rw.Images[k]
		if img.Digest.String() == d || img.OriginalDigest.String() == d ||
			slices.ContainsFunc(img.Signatures, func(s artifact.ImageSignature) bool { return s.Subject.String() == d }) {
			keys = append(keys, k)
		}
	}
	return keys
}

// registryPath splits a reference into the registry by digest into its
// repository path and digest.
func registryPath(registry, image string) (path, d string) {
	path, d, _ = strings.Cut(strings.TrimPrefix(image, registry+"/"), "@")
	if i := strings.LastIndex(path, ":"); i >= 0 {
		path = path[:i] // a tag besides the digest
	}
	return path, d
}

// unknown reports whether pod names an image (valid or not) that no
// deployed package recorded and that is not in the registry by digest.
func (rw *Rewriter) unknown(pod *corev1.Pod) bool {
	for _, image := range podImages(pod) {
		if _, _, known, _ := rw.lookup(image); !known {
			return true
		}
	}
	return false
}

// podImages lists the images of every init, regular and ephemeral container.
func podImages(pod *corev1.Pod) []string {
	var out []string
	for _, c := range pod.Spec.InitContainers {
		out = append(out, c.Image)
	}
	for _, c := range pod.Spec.Containers {
		out = append(out, c.Image)
	}
	for _, c := range pod.Spec.EphemeralContainers {
		out = append(out, c.Image)
	}
	return out
}

// byDigest finds the key of an image of repository name whose stored or
// original digest is d.
func (rw *Rewriter) byDigest(name string, d digest.Digest) (string, bool) {
	for k, img := range rw.Images {
		if strings.HasPrefix(k, name+":") && (img.Digest == d || img.OriginalDigest == d) {
			return k, true
		}
	}
	return "", false
}

// Change is one rewritten image of a Pod, with its JSON pointer.
type Change struct {
	Path     string `json:"path"`
	Old, New string
}

// Pod rewrites every container, init container and ephemeral container
// image of pod in place and returns what changed.
func (rw *Rewriter) Pod(pod *corev1.Pod) ([]Change, error) {
	var changes []Change
	do := func(kind string, i int, c *string) error {
		n, err := rw.Rewrite(*c)
		if err != nil {
			return fmt.Errorf("%s[%d]: %w", kind, i, err)
		}
		if n != *c {
			changes = append(changes, Change{Path: fmt.Sprintf("/spec/%s/%d/image", kind, i), Old: *c, New: n})
			*c = n
		}
		return nil
	}
	for i := range pod.Spec.InitContainers {
		if err := do("initContainers", i, &pod.Spec.InitContainers[i].Image); err != nil {
			return nil, err
		}
	}
	for i := range pod.Spec.Containers {
		if err := do("containers", i, &pod.Spec.Containers[i].Image); err != nil {
			return nil, err
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if err := do("ephemeralContainers", i, &pod.Spec.EphemeralContainers[i].Image); err != nil {
			return nil, err
		}
	}
	return changes, nil
}

// coveredPath returns the repository of image, a reference into the
// registry, when a policy covers an image of that repository; else "".
func (rw *Rewriter) coveredPath(image string) string {
	path, _ := registryPath(rw.Registry, image)
	for _, k := range rw.keysAt(path) {
		if rw.Images[k].Policy != "" {
			return path
		}
	}
	return ""
}

// Check is an image of a Pod that a policy covers: its package's entry
// and the policy it names.
type Check struct {
	// Image is the reference as the Pod names it.
	Image string
	// Path is the image's repository in the registry (library/nginx).
	Path string
	// Entry is what its package recorded for it.
	Entry artifact.Image
	// Policy is the policy Entry.Policy names.
	Policy *imagesig.Policy
}

// Name is the image as refusals name it: its normalized repository and
// the digest the Pod runs (docker.io/library/nginx@sha256:…).
func (c Check) Name() string {
	named, err := reference.ParseNormalizedNamed(c.Entry.Ref)
	if err != nil {
		return c.Entry.Ref + "@" + c.Entry.Digest.String()
	}
	return named.Name() + "@" + c.Entry.Digest.String()
}

// Checks lists the images of pod that a signature policy covers, each
// image and policy once. An image already in the registry by digest is
// checked against the policy of every image entry with that content (fail
// closed), and refused when a policy covers its repository but no entry
// has that digest. An image whose package names a policy it does not
// declare is an error too.
func (rw *Rewriter) Checks(pod *corev1.Pod) ([]Check, error) {
	var out []Check
	seen := map[string]bool{}
	for _, image := range podImages(pod) {
		var keys []string
		if rw.isRegistry(image) {
			if keys = rw.inRegistry(image); len(keys) == 0 {
				if p := rw.coveredPath(image); p != "" {
					return nil, fmt.Errorf("image %s: a policy covers repository %s, and no package recorded this digest in it", image, p)
				}
			}
		} else if _, key, known, err := rw.lookup(image); err == nil && known {
			keys = []string{key}
		} // else Pod refuses or leaves it
		for _, key := range keys {
			img := rw.Images[key]
			if img.Policy == "" {
				continue
			}
			p := rw.Policies[key]
			if p == nil || p.Name != img.Policy {
				return nil, fmt.Errorf("image %s: policy %.64q is not in its package", image, img.Policy)
			}
			named, _ := reference.ParseNormalizedNamed(key)
			c := Check{Image: image, Path: reference.Path(named), Entry: img, Policy: p}
			id, err := verdictKey(c)
			if err != nil {
				return nil, err
			}
			if !seen[id] {
				seen[id] = true
				out = append(out, c)
			}
		}
	}
	return out, nil
}
