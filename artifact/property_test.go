package artifact_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestVerifiedPushesOnlyTheSignedGraph is a property test: whatever is done
// to a signed archive — entries added to index.json, blobs added, dropped
// or duplicated, signatures added, the order shuffled, a second signature
// by another key — if verify accepts the result, pushing it stores exactly
// the blobs the signed root reaches plus its signature manifest's, and tags
// exactly the version and the signature tag. Each seed applies a random
// sequence of mutations; some seeds must be accepted (a re-signed or
// reordered archive) for the property to say anything.
func TestVerifiedPushesOnlyTheSignedGraph(t *testing.T) {
	ctx := context.Background()
	signed, _, alicePub := signedPackage(t, newWorld(t), "signed.tar")
	bob, _ := keyPair(t, t.TempDir(), "bob")
	a := loadArchive(t, signed)
	extra := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.empty.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}`)
	empty := []byte("{}")
	junk := []byte("not part of any package")

	type mutation struct {
		name string
		fn   func(rng *rand.Rand, es []tarEntry) []tarEntry
	}
	addBlob := func(b []byte) func(*rand.Rand, []tarEntry) []tarEntry {
		return func(_ *rand.Rand, es []tarEntry) []tarEntry {
			h := *es[len(es)-1].Header
			h.Name = "blobs/sha256/" + digest.FromBytes(b).Encoded()
			return append(es, tarEntry{&h, b})
		}
	}
	addIndexEntry := func(d ocispec.Descriptor) func(*rand.Rand, []tarEntry) []tarEntry {
		return func(_ *rand.Rand, es []tarEntry) []tarEntry {
			var idx ocispec.Index
			for _, e := range es {
				if e.Header.Name == "index.json" {
					json.Unmarshal(e.Data, &idx)
				}
			}
			idx.Manifests = append(idx.Manifests, d)
			setFile(t, es, "index.json", idx)
			return es
		}
	}
	extraDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(extra), Size: int64(len(extra))}
	tagged := extraDesc
	tagged.Annotations = map[string]string{ocispec.AnnotationRefName: "1.0.0"}
	asSig := extraDesc
	asSig.Annotations = map[string]string{ocispec.AnnotationRefName: artifact.SignatureTag(a.root)}
	mutations := []mutation{
		{"add an unrelated manifest and its config", func(rng *rand.Rand, es []tarEntry) []tarEntry {
			return addBlob(extra)(rng, addBlob(empty)(rng, es))
		}},
		{"name it in index.json", addIndexEntry(extraDesc)},
		{"tag it as the version", addIndexEntry(tagged)},
		{"tag it as the signature", addIndexEntry(asSig)},
		{"add a stray blob", addBlob(junk)},
		{"drop a blob", func(rng *rand.Rand, es []tarEntry) []tarEntry {
			i := 5 + rng.IntN(len(es)-5)
			return append(es[:i:i], es[i+1:]...)
		}},
		{"duplicate a blob", func(rng *rand.Rand, es []tarEntry) []tarEntry {
			return append(es, es[5+rng.IntN(len(es)-5)])
		}},
		{"swap two blobs", func(rng *rand.Rand, es []tarEntry) []tarEntry {
			i, j := 5+rng.IntN(len(es)-5), 5+rng.IntN(len(es)-5)
			es[i], es[j] = es[j], es[i]
			return es
		}},
	}
	accepted := 0
	for seed := range 24 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		var applied []string
		path := a.write(t, func(es []tarEntry) []tarEntry {
			for range rng.IntN(3) + 1 {
				m := mutations[rng.IntN(len(mutations))]
				applied = append(applied, m.name)
				es = m.fn(rng, es)
			}
			return es
		})
		if seed%4 == 0 {
			// A second signature, by another key, over the untouched root.
			applied = append(applied, "signed by bob too")
			if r, err := artifact.Open(ctx, path); err == nil {
				artifact.Sign(ctx, r, bob, artifact.SignOptions{})
			}
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if _, err := verifyFile(path, alicePub); err != nil {
				t.Logf("%v: refused: %v", applied, err)
				return
			}
			accepted++
			root := t.TempDir()
			host := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: root}))
			if _, err := pushFile(t, path, host+"/pkgs/demo:1.0.0", artifact.PushOptions{}); err != nil {
				t.Fatalf("%v: verified but push failed: %v", applied, err)
			}
			want := signedGraph(t, path)
			got := readStorage(t, root)
			if fmt.Sprint(sortedDigests(got.blobs)) != fmt.Sprint(sortedDigests(want)) {
				t.Fatalf("%v: pushed %d blobs, the signed graph has %d", applied, len(got.blobs), len(want))
			}
			r := openPkg(t, path)
			sigTag := "pkgs/demo:" + artifact.SignatureTag(r.Root().Digest)
			if len(got.tags) != 2 || got.tags["pkgs/demo:1.0.0"] != r.Root().Digest || got.tags[sigTag] == "" {
				t.Fatalf("%v: tags %v", applied, got.tags)
			}
		})
	}
	if accepted == 0 {
		t.Fatal("no mutated archive was accepted: the property was never exercised")
	}
	t.Logf("%d of 24 mutated archives verified; each pushed exactly its signed graph", accepted)
}

// signedGraph lists the blobs reachable from the root of the package at path
// and from its signature manifest, read straight from the archive.
func signedGraph(t testing.TB, path string) map[digest.Digest]bool {
	t.Helper()
	a := loadArchive(t, path)
	out := map[digest.Digest]bool{}
	var visit func(d ocispec.Descriptor)
	visit = func(d ocispec.Descriptor) {
		if out[d.Digest] {
			return
		}
		out[d.Digest] = true
		switch d.MediaType {
		case ocispec.MediaTypeImageIndex, "application/vnd.docker.distribution.manifest.list.v2+json":
			for _, m := range a.index0(t, d.Digest).Manifests {
				visit(m)
			}
		case ocispec.MediaTypeImageManifest, "application/vnd.docker.distribution.manifest.v2+json":
			m := a.manifest(t, d.Digest)
			visit(m.Config)
			for _, l := range m.Layers {
				visit(l)
			}
		}
	}
	for _, d := range a.index.Manifests {
		visit(d)
	}
	return out
}

func sortedDigests(m map[digest.Digest]bool) []digest.Digest {
	var out []digest.Digest
	for d := range m {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
