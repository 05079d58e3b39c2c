package artifact_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// endlessRegistry is a registry that answers every listing — the catalog,
// tags, referrers — with pages of perPage entries, each naming a next one,
// forever. It counts the pages it served.
func endlessRegistry(t *testing.T, perPage int) (host string, pages *atomic.Int64) {
	t.Helper()
	pages = new(atomic.Int64)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := pages.Add(1)
		next := fmt.Sprintf("<%s?last=p%d&n=%d>; rel=\"next\"", r.URL.Path, n, perPage)
		names := make([]string, perPage)
		for i := range names {
			names[i] = fmt.Sprintf("p%d-%d", n, i)
		}
		var body any
		switch {
		case r.URL.Path == "/v2/":
			w.WriteHeader(http.StatusOK)
			return
		case r.URL.Path == "/v2/_catalog":
			body = map[string]any{"repositories": names}
		case strings.HasSuffix(r.URL.Path, "/tags/list"):
			body = map[string]any{"name": "app", "tags": names}
		case strings.Contains(r.URL.Path, "/referrers/"):
			refs := make([]ocispec.Descriptor, perPage)
			for i, name := range names {
				refs[i] = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, ArtifactType: "application/vnd.dev.cosign.artifact.sig.v1+json", Digest: digest.FromString(name), Size: 100}
			}
			w.Header().Set("Content-Type", ocispec.MediaTypeImageIndex)
			body = ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: refs}
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Link", next)
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(ts.Close)
	return registrytest.Host(ts), pages
}

// TestListingEndlessPages: a registry answering endless pages — of
// repositories, tags or referrers, empty or full — is refused after
// MaxListPages pages or MaxListEntries entries, in one line naming the
// listing, in well under a minute.
func TestListingEndlessPages(t *testing.T) {
	ctx := context.Background()
	subject := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromString("subject"), Size: 10}
	for _, tc := range []struct {
		name    string
		perPage int
		list    func(host string) error
		what    string
	}{
		{"catalog, empty pages", 0, func(host string) error {
			return artifact.ListRepositories(ctx, registryOf(t, host), func([]string) error { return nil })
		}, "the repositories of "},
		{"tags, empty pages", 0, func(host string) error {
			return artifact.ListTags(ctx, remoteRepo(t, host+"/app"), func([]string) error { return nil })
		}, "the tags of "},
		{"referrers, one a page", 1, func(host string) error {
			return artifact.ListReferrers(ctx, remoteRepo(t, host+"/app"), subject, "", func([]ocispec.Descriptor) error { return nil })
		}, "the referrers of " + subject.Digest.String()},
		{"catalog, full pages", 1000, func(host string) error {
			return artifact.ListRepositories(ctx, registryOf(t, host), func([]string) error { return nil })
		}, "the repositories of "},
		{"the receipt of a registry", 0, func(host string) error {
			_, err := artifact.HaveRegistry(ctx, registryOf(t, host), host, "")
			return err
		}, "the repositories of "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, pages := endlessRegistry(t, tc.perPage)
			start := time.Now()
			err := tc.list(host)
			took := time.Since(start)
			var le *artifact.ListLimitError
			if !errors.As(err, &le) || !errors.Is(err, artifact.ErrListLimit) {
				t.Fatalf("endless pages: %v", err)
			}
			wantPages := int64(artifact.MaxListPages + 1)
			if tc.perPage > 0 {
				wantPages = min(wantPages, int64(artifact.MaxListEntries/tc.perPage+1))
			}
			if got := pages.Load(); got != wantPages {
				t.Errorf("followed %d pages, want %d", got, wantPages)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.what) || strings.Contains(msg, "\n") || strings.Count(msg, tc.what) != 1 {
				t.Errorf("message %q: want one line naming %q once", msg, tc.what)
			}
			if took > 30*time.Second {
				t.Errorf("refused after %s", took)
			}
			t.Logf("%s: refused after %d pages in %s: %v", tc.name, pages.Load(), took.Round(time.Millisecond), err)
		})
	}
}

// TestListedRepositoryWithoutTags: a repository whose manifests were all
// pushed by digest (a package's OCI artifacts, referrers) is in the
// catalog, yet distribution answers 404 NAME_UNKNOWN for its tags (it
// keeps no tags folder); ListTags reads that as no tags, and a receipt of
// the registry walks past it, instead of failing the whole walk (backup,
// registry have, the fleet's report, the dashboard's registry page did).
func TestListedRepositoryWithoutTags(t *testing.T) {
	ctx := context.Background()
	host := registrytest.New(t)
	repo := remoteRepo(t, host+"/bydigest")
	cfg := []byte("{}")
	cfgDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digest.FromBytes(cfg), Size: int64(len(cfg))}
	if err := repo.Push(ctx, cfgDesc, bytes.NewReader(cfg)); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, "", oras.PackManifestOptions{ConfigDescriptor: &cfgDesc}); err != nil {
		t.Fatal(err)
	}
	var listed []string
	if err := artifact.ListRepositories(ctx, registryOf(t, host), func(p []string) error { listed = append(listed, p...); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(listed, "bydigest") {
		t.Fatalf("the catalog lists %v, want bydigest in it", listed)
	}
	var tags []string
	if err := artifact.ListTags(ctx, repo, func(p []string) error { tags = append(tags, p...); return nil }); err != nil || len(tags) != 0 {
		t.Fatalf("tags of a repository without any: %v, %v", tags, err)
	}
	if _, err := artifact.HaveRegistry(ctx, registryOf(t, host), host, ""); err != nil {
		t.Fatalf("receipt of a registry listing a repository without tags: %v", err)
	}
}
