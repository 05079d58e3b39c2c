package centre

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
)

// ReceiptRepository is where a member's receipts are kept in the centre's
// registry: ReceiptRepository/<member>, its last one tagged latest.
const ReceiptRepository = "ferry-fleet/receipts"

func (c *Centre) receiptRepo(member string) (*remote.Repository, error) {
	if c.Registry == "" {
		return nil, fmt.Errorf("the centre has no registry to keep member %s's receipt in", member)
	}
	return c.Remote.Repository(c.Registry + "/" + ReceiptRepository + "/" + member)
}

// storeReceipt pushes a receipt (its canonical JSON) as a blob, and a
// manifest naming it tagged latest, to the member's receipt repository;
// it returns the receipt's digest. A receipt the registry holds already is
// not sent again.
func (c *Centre) storeReceipt(ctx context.Context, member string, data []byte) (string, error) {
	repo, err := c.receiptRepo(member)
	if err != nil {
		return "", err
	}
	desc := content.NewDescriptorFromBytes(artifact.MediaTypeReceipt, data)
	have, err := repo.Exists(ctx, desc)
	if err == nil && !have {
		err = repo.Push(ctx, desc, bytes.NewReader(data))
	}
	if err == nil {
		var m ocispec.Descriptor
		m, err = oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, artifact.MediaTypeReceipt, oras.PackManifestOptions{Layers: []ocispec.Descriptor{desc}})
		if err == nil {
			err = repo.Tag(ctx, m, "latest")
		}
	}
	if err != nil {
		// The member's report is not recorded: it reports again later.
		return "", &problem{status: http.StatusServiceUnavailable, msg: oneLine(fmt.Sprintf("the centre cannot store member %s's receipt in %s now: %v", member, c.Registry, err))}
	}
	return desc.Digest.String(), nil
}

// loadReceipt reads back the receipt d of a member, checked against its
// digest; "" is an empty receipt (the member holds nothing the centre
// knows of).
func (c *Centre) loadReceipt(ctx context.Context, member, d string) (*artifact.Receipt, error) {
	if d == "" {
		return &artifact.Receipt{MediaType: artifact.MediaTypeReceipt, Source: "member " + member + " (no receipt)", Blobs: map[digest.Digest]int64{}}, nil
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
