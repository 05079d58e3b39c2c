package centre

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
)

// ReceiptRepository is where a member's receipts are kept in the centre's
// registry: ReceiptRepository/<member>, its last one tagged latest.
//
// Each report that carries receipts is kept as a manifest (artifact type
// artifact.MediaTypeReceipt) whose layers are its receipts, each a blob
// of canonical JSON: the receipt of the member's whole registry without
// annotations (the only layer of what an older centre kept), and one per
// repository annotated AnnotationReceiptRepository. The Member's status
// names the whole receipt (receipt) and the manifest (receipts).
const ReceiptRepository = "ferry-fleet/receipts"

// Annotations of a member's receipts manifest (ReceiptRepository).
const (
	// AnnotationReceiptRepository, on a layer, names the repository of
	// the member's registry that receipt lists alone.
	AnnotationReceiptRepository = "dev.ferry.fleet.receipt.repository"
	// AnnotationReceiptRepositories, on the manifest, counts the
	// repositories the report carried receipts of; set (even "0") when it
	// carried them, so that a repository it names none of gets no
	// receipt, not the whole registry's.
	AnnotationReceiptRepositories = "dev.ferry.fleet.receipt.repositories"
)

func (c *Centre) receiptRepo(member string) (*remote.Repository, error) {
	if c.Registry == "" {
		return nil, fmt.Errorf("the centre has no registry to keep member %s's receipt in", member)
	}
	return c.Remote.Repository(c.Registry + "/" + ReceiptRepository + "/" + member)
}

// storedReceipts names what storeReceipts stored.
type storedReceipts struct {
	// whole is the digest of the whole registry's receipt ("" for none);
	// manifest the digest of the manifest listing them all.
	whole, manifest string
	// layers are the digests of the receipts it lists.
	layers []digest.Digest
}

// storeReceipts pushes a report's receipts (each its canonical JSON) as
// blobs — the whole registry's, if any, and each repository's — and a
// manifest naming them tagged latest, to the member's receipt repository.
// repositories is nil when the report carried none of them. A receipt the
// registry holds already is not sent again.
func (c *Centre) storeReceipts(ctx context.Context, member string, whole []byte, repositories map[string][]byte) (*storedReceipts, error) {
	repo, err := c.receiptRepo(member)
	if err != nil {
		return nil, err
	}
	out := &storedReceipts{}
	var layers []ocispec.Descriptor
	push := func(data []byte, annotations map[string]string) error {
		desc := content.NewDescriptorFromBytes(artifact.MediaTypeReceipt, data)
		have, err := repo.Exists(ctx, desc)
		if err == nil && !have {
			err = repo.Push(ctx, desc, bytes.NewReader(data))
		}
		desc.Annotations = annotations
		layers = append(layers, desc)
		return err
	}
	if whole != nil {
		err = push(whole, nil)
		out.whole = layers[0].Digest.String()
	}
	var ann map[string]string
	if repositories != nil {
		ann = map[string]string{AnnotationReceiptRepositories: strconv.Itoa(len(repositories))}
		names := make([]string, 0, len(repositories))
		for name := range repositories {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			if err != nil {
				break
			}
			err = push(repositories[name], map[string]string{AnnotationReceiptRepository: name})
		}
	}
	if err == nil {
		var m ocispec.Descriptor
		m, err = oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, artifact.MediaTypeReceipt,
			oras.PackManifestOptions{Layers: layers, ManifestAnnotations: ann})
		if err == nil {
			err = repo.Tag(ctx, m, "latest")
			out.manifest = m.Digest.String()
		}
		for _, l := range layers {
			out.layers = append(out.layers, l.Digest)
		}
	}
	if err != nil {
		// The member's report is not recorded: it reports again later.
		return nil, &problem{status: http.StatusServiceUnavailable, msg: oneLine(fmt.Sprintf("the centre cannot store member %s's receipt in %s now: %v", member, c.Registry, err))}
	}
	return out, nil
}

// dropReceipts deletes from the registry what a member's report replaced:
// its receipts manifest before and the receipts it listed (or, of an
// older centre's, the whole receipt alone) that the new one, now, does
// not. A member's receipts in the registry are then its last report's,
// however often it reports new ones. It is done as well as the registry
// lets it (one that deletes nothing keeps them for its garbage
// collection), and never fails the report.
func (c *Centre) dropReceipts(ctx context.Context, member string, before v1alpha1.MemberStatus, now *storedReceipts) {
	if before.Receipts == now.manifest && before.Receipt == now.whole {
		return
	}
	repo, err := c.receiptRepo(member)
	if err != nil {
		return
	}
	keep := map[digest.Digest]bool{digest.Digest(now.manifest): true}
	for _, l := range now.layers {
		keep[l] = true
	}
	var drop []ocispec.Descriptor
	switch {
	case before.Receipts != "" && !keep[digest.Digest(before.Receipts)]:
		man, err := c.receiptsManifest(ctx, member, before.Receipts)
		if err == nil {
			var desc ocispec.Descriptor
			if desc, err = repo.Resolve(ctx, before.Receipts); err == nil {
				err = repo.Delete(ctx, desc)
			}
		}
		if err != nil {
			c.log().Debug("fleet: drop a member's replaced receipts", "member", member, "error", oneLine(err.Error()))
			return
		}
		for _, l := range man.Layers {
			if !keep[l.Digest] {
				drop = append(drop, l)
			}
		}
	case before.Receipts == "" && before.Receipt != "" && !keep[digest.Digest(before.Receipt)]:
		if desc, err := repo.Blobs().Resolve(ctx, before.Receipt); err == nil {
			drop = append(drop, desc)
		}
	}
	for _, desc := range drop {
		if err := repo.Blobs().Delete(ctx, desc); err != nil {
			c.log().Debug("fleet: drop a member's replaced receipt", "member", member, "digest", desc.Digest.String(), "error", oneLine(err.Error()))
		}
	}
}

// emptyReceipt lists nothing: a delta against it is the whole package.
func emptyReceipt(source string) *artifact.Receipt {
	return &artifact.Receipt{MediaType: artifact.MediaTypeReceipt, Source: source, Blobs: map[digest.Digest]int64{}}
}

// loadReceipt reads back the receipt d of a member, checked against its
// digest; "" is an empty receipt (the member holds nothing the centre
// knows of).
func (c *Centre) loadReceipt(ctx context.Context, member, d string) (*artifact.Receipt, error) {
	if d == "" {
		return emptyReceipt("member " + member + " (no receipt)"), nil
	}
	repo, err := c.receiptRepo(member)
	if err != nil {
		return nil, err
	}
	desc, err := repo.Blobs().Resolve(ctx, d)
	if err == nil && desc.Size > artifact.MaxReceiptSize {
		err = fmt.Errorf("it is %d bytes, more than %d", desc.Size, artifact.MaxReceiptSize)
	}
	var data []byte
	if err == nil {
		desc.MediaType = artifact.MediaTypeReceipt
		data, err = content.FetchAll(ctx, repo.Blobs(), desc)
	}
	if err != nil {
		return nil, fmt.Errorf("read member %s's receipt %s from %s: %w", member, d, c.Registry, err)
	}
	rc, err := artifact.ParseReceipt(data)
	if err != nil {
		return nil, fmt.Errorf("member %s's stored receipt %s: %w", member, d, err)
	}
	return rc, nil
}

// bundleReceipt is the receipt a carried member's bundle of the package
// in repository (of its registry) is made against, and its digest ("" for
// none): the receipt of that repository its last report carried; none
// when that report carried receipts of repositories but not of this one
// (the site runs no Package there: the whole package crosses); the whole
// registry's, and whole set, when its report carried none of them (an
// older ferry's, or a centre's that kept none): a delta against it may
// leave out blobs held only in other repositories, which the site's
// deploy then lacks.
func (c *Centre) bundleReceipt(ctx context.Context, m *v1alpha1.Member, repository string) (rc *artifact.Receipt, d string, whole bool, err error) {
	st := &m.Status
	if st.Receipts == "" {
		rc, err = c.loadReceipt(ctx, m.Name, st.Receipt)
		return rc, st.Receipt, st.Receipt != "", err
	}
	man, err := c.receiptsManifest(ctx, m.Name, st.Receipts)
	if err != nil {
		return nil, "", false, err
	}
	if _, ok := man.Annotations[AnnotationReceiptRepositories]; !ok {
		rc, err = c.loadReceipt(ctx, m.Name, st.Receipt)
		return rc, st.Receipt, st.Receipt != "", err
	}
	for _, l := range man.Layers {
		if l.Annotations[AnnotationReceiptRepository] == repository {
			rc, err = c.loadReceipt(ctx, m.Name, l.Digest.String())
			return rc, l.Digest.String(), false, err
		}
	}
	return emptyReceipt(fmt.Sprintf("member %s (no receipt of repository %s)", m.Name, repository)), "", false, nil
}

// receiptsManifest reads back the receipts manifest d of a member: at
// most artifact.MaxManifestSize, checked against its digest, of artifact
// type artifact.MediaTypeReceipt, its layers' digests checked.
func (c *Centre) receiptsManifest(ctx context.Context, member, d string) (*ocispec.Manifest, error) {
	repo, err := c.receiptRepo(member)
	if err != nil {
		return nil, err
	}
	desc, err := repo.Resolve(ctx, d)
	if err == nil && desc.Digest.String() != d {
		err = fmt.Errorf("the registry answered with %s", desc.Digest)
	}
	var data []byte
	if err == nil {
		data, err = artifact.FetchManifest(ctx, repo, desc)
	}
	if err != nil {
		return nil, fmt.Errorf("read member %s's receipts %s from %s: %w", member, d, c.Registry, err)
	}
	var man ocispec.Manifest
	if err := json.Unmarshal(data, &man); err != nil || man.ArtifactType != artifact.MediaTypeReceipt {
		return nil, fmt.Errorf("member %s's stored receipts %s: not a manifest of receipts", member, d)
	}
	for _, l := range man.Layers {
		if err := l.Digest.Validate(); err != nil || l.Digest.Algorithm() != digest.SHA256 {
			return nil, fmt.Errorf("member %s's stored receipts %s: a layer's digest %q: not sha256", member, d, truncate(string(l.Digest)))
		}
	}
	return &man, nil
}
