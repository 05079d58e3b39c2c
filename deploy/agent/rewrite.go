// Package agent is ferry's mutating admission webhook, run in the cluster
// by `ferry agent`: it rewrites every image of a Pod to the in-cluster
// registry, by the digest a deployed package recorded, so that a tag is
// never trusted in the cluster (Rewriter, Webhook, Cache, Serve), and
// copies the registry's pull secret into the Pod's namespace
// (PullSecrets). Install, run by `ferry init` once the registry is up,
// builds the agent's image from the ferry binary, pushes it to the
// registry and deploys it with its certificates, RBAC and webhook
// registration.
package agent

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"

	"github.com/ferrypkg/ferry/artifact"
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

// normalize gives the canonical form of an image reference: registry host,
// full path, and the tag ("latest" when none) or digest.
func normalize(ref string) (string, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

// Rewriter turns image references into in-cluster ones.
type Rewriter struct {
	// Registry is the in-cluster registry host, e.g. 127.0.0.1:31999.
	Registry string
	// Images are the digests deployed packages recorded.
	Images Images
	// RequireKnown refuses images that are in no deployed package instead
	// of leaving them as they are.
	RequireKnown bool
}

// Rewrite returns the in-cluster reference for image:
// Registry/<original path>@<recorded digest>. An image already in the
// registry by digest is returned as it is (idempotent). An unknown image is
// returned unchanged, or an ErrUnknownImage with RequireKnown.
func (rw *Rewriter) Rewrite(image string) (string, error) {
	ref, known, err := rw.lookup(image)
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
// deployed package recorded it.
func (rw *Rewriter) lookup(image string) (ref string, known bool, err error) {
	if strings.HasPrefix(image, rw.Registry+"/") && strings.Contains(image, "@sha256:") {
		return image, true, nil
	}
	key, err := normalize(image)
	if err != nil {
		return "", false, err
	}
	img, ok := rw.Images[key]
	d := img.Digest
	if !ok {
		// A reference by digest names its content: known when a package
		// recorded that digest (stored or original) for the repository.
		if named, err := reference.ParseNormalizedNamed(image); err == nil {
			if dg, isDigested := named.(reference.Digested); isDigested {
				d, ok = rw.byDigest(named.Name(), dg.Digest())
				key = named.Name() + "@" + d.String()
			}
		}
	}
	if !ok {
		return "", false, nil
	}
	named, _ := reference.ParseNormalizedNamed(key)
	return rw.Registry + "/" + reference.Path(named) + "@" + d.String(), true, nil
}

// unknown reports whether pod names an image (valid or not) that no
// deployed package recorded and that is not in the registry by digest.
func (rw *Rewriter) unknown(pod *corev1.Pod) bool {
	for _, image := range podImages(pod) {
		if _, known, _ := rw.lookup(image); !known {
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

// byDigest finds the stored digest of an image of repository name whose
// stored or original digest is d.
func (rw *Rewriter) byDigest(name string, d digest.Digest) (digest.Digest, bool) {
	for k, img := range rw.Images {
		if strings.HasPrefix(k, name+":") && (img.Digest == d || img.OriginalDigest == d) {
			return img.Digest, true
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
