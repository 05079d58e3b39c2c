package centre

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

var reChannel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Promote puts a version on a track's channel: ref is a digest or a tag of
// the track's repository in the centre's registry, resolved there to the
// package's root digest (what is not a ferry package is refused); its
// version and its package's own name are read from the root's annotations
// (the version, else the tag). The name is recorded on the channel: it is
// the Package's name at members (v1alpha1.ReleaseTrack.PackageName), which
// a member checks its bundle against. A package named otherwise than the
// track's spec.package, or than the package its other channels carry, is
// refused: a track is one package. The track is annotated AnnotationBy
// with by, and the promotion recorded (newest first, at most
// MaxPromotions). Placements following the channel start rolling it out
// at the next pass.
func (c *Centre) Promote(ctx context.Context, track, channel, ref, by string) (*v1alpha1.ReleaseTrack, error) {
	if len(channel) > 63 || !reChannel.MatchString(channel) {
		return nil, fmt.Errorf("the channel name %q is not a DNS label", truncate(channel))
	}
	var t v1alpha1.ReleaseTrack
	if err := c.Client.Get(ctx, c.key(track), &t); err != nil {
		return nil, notFound(err, "track "+track, "track %s is not in the fleet", track)
	}
	d, root, err := c.resolve(ctx, t.Spec.Repository, ref)
	if err != nil {
		return nil, err
	}
	ch := v1alpha1.Channel{Name: channel, Digest: d.String(), Version: root.version, Package: root.name}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.fresh().Get(ctx, c.key(track), &t); err != nil {
			return err
		}
		if err := samePackage(&t, channel, root.name); err != nil {
			return err
		}
		i := -1
		for j := range t.Spec.Channels {
			if t.Spec.Channels[j].Name == channel {
				i = j
			}
		}
		if i < 0 {
			t.Spec.Channels = append(t.Spec.Channels, ch)
		} else {
			t.Spec.Channels[i] = ch
		}
		setBy(&t.ObjectMeta.Annotations, by)
		if err := c.Client.Update(ctx, &t); err != nil {
			return err
		}
		t.Status.Promotions = append([]v1alpha1.Promotion{{Channel: channel, Digest: ch.Digest, Version: ch.Version, By: by, At: metav1.NewTime(c.now())}}, t.Status.Promotions...)
		if len(t.Status.Promotions) > MaxPromotions {
			t.Status.Promotions = t.Status.Promotions[:MaxPromotions]
		}
		return c.Client.Status().Update(ctx, &t)
	})
	if err != nil {
		return nil, fmt.Errorf("promote %s to channel %s of track %s: %w", describe(ch.Digest, ch.Version), channel, track, err)
	}
	c.kick()
	return &t, nil
}

// samePackage refuses to put package name on a channel of t when the
// track's spec.package, or another of its channels, names another.
func samePackage(t *v1alpha1.ReleaseTrack, channel, name string) error {
	if t.Spec.Package != "" && t.Spec.Package != name {
		return fmt.Errorf("it is package %s, not %s as the track's spec.package says", name, t.Spec.Package)
	}
	for _, ch := range t.Spec.Channels {
		if ch.Name != channel && ch.Package != "" && ch.Package != name {
			return fmt.Errorf("it is package %s, not %s as the track's channel %s carries: a track is one package", name, ch.Package, ch.Name)
		}
	}
	return nil
}

// rootInfo is what a package's root says of it.
type rootInfo struct {
	// name is the package's own name; version its version (else the tag
	// resolved).
	name, version string
}

// rePackageName is the form of a package's name (its ferry.json's).
var rePackageName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)

// resolve finds the root digest ref names in repository of the centre's
// registry, and the package's name and version.
func (c *Centre) resolve(ctx context.Context, repository, ref string) (digest.Digest, rootInfo, error) {
	if c.Registry == "" {
		return "", rootInfo{}, fmt.Errorf("the centre has no registry to resolve %s in", ref)
	}
	name := c.Registry + "/" + repository
	repo, err := c.Remote.Repository(name)
	if err != nil {
		return "", rootInfo{}, err
	}
	desc, err := repo.Resolve(ctx, ref)
	if err != nil {
		return "", rootInfo{}, artifact.WithRef("resolve", name+refSep(ref)+ref, err)
	}
	if d, err := digest.Parse(ref); err == nil && d != desc.Digest {
		return "", rootInfo{}, fmt.Errorf("%s@%s: the registry answered with %s", name, ref, desc.Digest)
	}
	data, err := artifact.FetchManifest(ctx, repo, desc)
	if err != nil {
		return "", rootInfo{}, fmt.Errorf("%s%s%s: %w", name, refSep(ref), ref, err)
	}
	var idx ocispec.Index
	if json.Unmarshal(data, &idx) != nil || desc.MediaType != ocispec.MediaTypeImageIndex || idx.ArtifactType != artifact.ArtifactTypePackage {
		return "", rootInfo{}, fmt.Errorf("%s%s%s is not a ferry package (media type %s)", name, refSep(ref), ref, desc.MediaType)
	}
	info := rootInfo{name: idx.Annotations[artifact.AnnotationPackageName], version: idx.Annotations[artifact.AnnotationPackageVersion]}
	if !rePackageName.MatchString(info.name) {
		return "", rootInfo{}, fmt.Errorf("%s%s%s: its root names no package (%s %q)", name, refSep(ref), ref, artifact.AnnotationPackageName, truncate(info.name))
	}
	if info.version == "" && refSep(ref) == ":" {
		info.version = ref
	}
	return desc.Digest, info, nil
}

func refSep(ref string) string {
	if _, err := digest.Parse(ref); err == nil {
		return "@"
	}
	return ":"
}

// Rollback pins a placement to the version before its last: the one its
// members last all ran Ready (status.current) when a rollout is under way
// or halted, else the one before that (status.previous). The channel is
// cleared; the placement is annotated AnnotationRollback (so that the
// rollout is recorded as a rollback and goes to every member at once) and
// AnnotationBy.
func (c *Centre) Rollback(ctx context.Context, placement, by string) (*v1alpha1.Placement, error) {
	var p v1alpha1.Placement
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.fresh().Get(ctx, c.key(placement), &p); err != nil {
			return notFound(err, "placement "+placement, "placement %s is not in the fleet", placement)
		}
		st := p.Status
		to := st.Previous
		if st.Current != "" && st.Digest != st.Current {
			to = st.Current
		}
		if to == "" {
			return fmt.Errorf("placement %s has no earlier version to roll back to", placement)
		}
		p.Spec.Digest, p.Spec.Channel = to, ""
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationRollback] = to
		setBy(&p.Annotations, by)
		return c.Client.Update(ctx, &p)
	})
	if err != nil {
		return nil, err
	}
	c.kick()
	return &p, nil
}

// setBy sets (or, for "", removes) AnnotationBy.
func setBy(annotations *map[string]string, by string) {
	if by == "" {
		delete(*annotations, AnnotationBy)
		return
	}
	if *annotations == nil {
		*annotations = map[string]string{}
	}
	(*annotations)[AnnotationBy] = by
}
