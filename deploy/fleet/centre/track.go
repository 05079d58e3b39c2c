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
// version is read from the root's annotations (else the tag). The track is
// annotated AnnotationBy with by, and the promotion recorded (newest
// first, at most MaxPromotions). Placements following the channel start
// rolling it out at the next pass.
func (c *Centre) Promote(ctx context.Context, track, channel, ref, by string) (*v1alpha1.ReleaseTrack, error) {
	if len(channel) > 63 || !reChannel.MatchString(channel) {
		return nil, fmt.Errorf("the channel name %q is not a DNS label", truncate(channel))
	}
	var t v1alpha1.ReleaseTrack
	if err := c.Client.Get(ctx, c.key(track), &t); err != nil {
		return nil, notFound(err, "track %s is not in the fleet", track)
	}
	d, version, err := c.resolve(ctx, t.Spec.Repository, ref)
	if err != nil {
		return nil, err
	}
	ch := v1alpha1.Channel{Name: channel, Digest: d.String(), Version: version}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.fresh().Get(ctx, c.key(track), &t); err != nil {
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
		t.Status.Promotions = append([]v1alpha1.Promotion{{Channel: channel, Digest: ch.Digest, Version: version, By: by, At: metav1.NewTime(c.now())}}, t.Status.Promotions...)
		if len(t.Status.Promotions) > MaxPromotions {
			t.Status.Promotions = t.Status.Promotions[:MaxPromotions]
		}
		return c.Client.Status().Update(ctx, &t)
	})
	if err != nil {
		return nil, fmt.Errorf("promote %s to channel %s of track %s: %w", describe(ch.Digest, version), channel, track, err)
	}
	c.kick()
	return &t, nil
}

// resolve finds the root digest ref names in repository of the centre's
// registry, and the package's version.
func (c *Centre) resolve(ctx context.Context, repository, ref string) (digest.Digest, string, error) {
	if c.Registry == "" {
		return "", "", fmt.Errorf("the centre has no registry to resolve %s in", ref)
	}
	name := c.Registry + "/" + repository
	repo, err := c.Remote.Repository(name)
	if err != nil {
		return "", "", err
	}
	desc, err := repo.Resolve(ctx, ref)
	if err != nil {
		return "", "", artifact.WithRef("resolve", name+refSep(ref)+ref, err)
	}
	if d, err := digest.Parse(ref); err == nil && d != desc.Digest {
		return "", "", fmt.Errorf("%s@%s: the registry answered with %s", name, ref, desc.Digest)
	}
	data, err := artifact.FetchManifest(ctx, repo, desc)
	if err != nil {
		return "", "", fmt.Errorf("%s%s%s: %w", name, refSep(ref), ref, err)
	}
	var idx ocispec.Index
	if json.Unmarshal(data, &idx) != nil || desc.MediaType != ocispec.MediaTypeImageIndex || idx.ArtifactType != artifact.ArtifactTypePackage {
		return "", "", fmt.Errorf("%s%s%s is not a ferry package (media type %s)", name, refSep(ref), ref, desc.MediaType)
	}
	version := idx.Annotations[artifact.AnnotationPackageVersion]
	if version == "" && refSep(ref) == ":" {
		version = ref
	}
	return desc.Digest, version, nil
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
			return notFound(err, "placement %s is not in the fleet", placement)
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
