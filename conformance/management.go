package conformance

import (
	"context"
	"fmt"
	"net/http"

	"github.com/opencontainers/go-digest"
)

// deleteRef DELETEs path and maps "deletion disabled" (400/405, which the
// spec permits) to a skip.
func deleteRef(ctx context.Context, e *env, path, what string) error {
	resp, err := e.get(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return err
	}
	if resp.Status == http.StatusMethodNotAllowed || resp.Status == http.StatusBadRequest {
		return skipf("%s: %d, deletion is disabled (spec-permitted)", what, resp.Status)
	}
	return wantStatus(what, resp, http.StatusAccepted)
}

func wantGone(ctx context.Context, e *env, path, what string, codes ...string) error {
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		resp, err := e.get(ctx, m, path, manifestAccept)
		if err != nil {
			return err
		}
		if err := wantStatus(m+" "+what, resp, http.StatusNotFound); err != nil {
			return err
		}
		if m == http.MethodGet {
			if err := wantErrorCode(m+" "+what, resp, codes...); err != nil {
				return err
			}
		}
	}
	return nil
}

var managementChecks = []check{
	def(Management, "delete-tag", "Deleting tags (end-9)", "DELETE a tag: 202, the tag then answers 404, the manifest and its other tags remain",
		func(ctx context.Context, e *env) error {
			repo := e.repo("manage")
			m := imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"delete": "tag", "run": e.runID})
			if err := e.pushImage(ctx, repo, "keep-tag", m, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if _, err := e.pushManifest(ctx, repo, "drop-tag", m); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if err := deleteRef(ctx, e, manifestPath(repo, "drop-tag"), "DELETE tag"); err != nil {
				return err
			}
			if err := wantGone(ctx, e, manifestPath(repo, "drop-tag"), "deleted tag", "MANIFEST_UNKNOWN"); err != nil {
				return err
			}
			if err := getManifest(ctx, e, repo, "keep-tag", m); err != nil {
				return fmt.Errorf("after deleting another tag: %w", err)
			}
			return getManifest(ctx, e, repo, m.desc.Digest.String(), m)
		}),
	def(Management, "delete-manifest", "Deleting Manifests (end-9)", "DELETE a manifest by digest: 202, then 404 by digest and by every tag that pointed to it",
		func(ctx context.Context, e *env) error {
			repo := e.repo("manage")
			m := imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"delete": "manifest", "run": e.runID})
			if err := e.pushImage(ctx, repo, "doomed", m, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if err := deleteRef(ctx, e, manifestPath(repo, m.desc.Digest.String()), "DELETE manifest"); err != nil {
				return err
			}
			if err := wantGone(ctx, e, manifestPath(repo, m.desc.Digest.String()), "deleted manifest", "MANIFEST_UNKNOWN"); err != nil {
				return err
			}
			return wantGone(ctx, e, manifestPath(repo, "doomed"), "tag of a deleted manifest", "MANIFEST_UNKNOWN")
		}),
	def(Management, "delete-manifest-unknown", "Deleting Manifests (end-9: 404)", "DELETE an absent manifest: 404",
		func(ctx context.Context, e *env) error {
			repo := e.repo("manage")
			if err := e.pushBlob(ctx, repo, emptyConfig()); err != nil { // make sure the repository exists
				return fmt.Errorf("setup: %w", err)
			}
			resp, err := e.get(ctx, http.MethodDelete, manifestPath(repo, digest.FromString("absent manifest "+e.runID).String()), nil)
			if err != nil {
				return err
			}
			if resp.Status == http.StatusMethodNotAllowed || resp.Status == http.StatusBadRequest {
				return skipf("deletion is disabled (spec-permitted)")
			}
			return wantStatus("DELETE absent manifest", resp, http.StatusNotFound)
		}),
	def(Management, "delete-referrer", "Deleting Manifests (end-9); Listing Referrers (end-12a)", "a deleted referrer disappears from the subject's referrers list",
		func(ctx context.Context, e *env) error {
			repo := e.repo("manage-referrers")
			subject := imageManifest(emptyConfig(), nil, artifactTypeTest, nil, map[string]string{"run": e.runID})
			if err := e.pushImage(ctx, repo, "", subject, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			sd := subject.desc
			sd.ArtifactType = ""
			keep := imageManifest(emptyConfig(), nil, "application/vnd.ferry.conformance.keep.v1", &sd, nil)
			drop := imageManifest(emptyConfig(), nil, "application/vnd.ferry.conformance.drop.v1", &sd, nil)
			for _, r := range []blob{keep, drop} {
				if _, err := e.pushManifest(ctx, repo, r.desc.Digest.String(), r); err != nil {
					return fmt.Errorf("setup: %w", err)
				}
			}
			idx, _, err := getReferrers(ctx, e, repo, sd.Digest.String(), "")
			if err != nil {
				return err
			}
			if err := wantDescriptors(idx.Manifests, []blob{keep, drop}); err != nil {
				return fmt.Errorf("before delete: %w", err)
			}
			if err := deleteRef(ctx, e, manifestPath(repo, drop.desc.Digest.String()), "DELETE referrer"); err != nil {
				return err
			}
			idx, _, err = getReferrers(ctx, e, repo, sd.Digest.String(), "")
			if err != nil {
				return err
			}
			if err := wantDescriptors(idx.Manifests, []blob{keep}); err != nil {
				return fmt.Errorf("after delete: %w", err)
			}
			return nil
		}),
	def(Management, "delete-blob", "Deleting Blobs (end-10)", "DELETE a blob: 202, then GET/HEAD answer 404 with BLOB_UNKNOWN",
		func(ctx context.Context, e *env) error {
			repo := e.repo("manage")
			b := newBlob("application/octet-stream", randomBytes("delete blob "+e.runID, 3000))
			if err := e.pushBlob(ctx, repo, b); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if err := deleteRef(ctx, e, blobPath(repo, b.desc.Digest), "DELETE blob"); err != nil {
				return err
			}
			return wantGone(ctx, e, blobPath(repo, b.desc.Digest), "deleted blob", "BLOB_UNKNOWN")
		}),
	def(Management, "delete-blob-unknown", "Deleting Blobs (end-10: 404)", "DELETE an absent blob: 404",
		func(ctx context.Context, e *env) error {
			repo := e.repo("manage")
			if err := e.pushBlob(ctx, repo, emptyConfig()); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			resp, err := e.get(ctx, http.MethodDelete, blobPath(repo, digest.FromString("absent blob "+e.runID)), nil)
			if err != nil {
				return err
			}
			if resp.Status == http.StatusMethodNotAllowed {
				return skipf("deletion is disabled (spec-permitted)")
			}
			return wantStatus("DELETE absent blob", resp, http.StatusNotFound)
		}),
}
