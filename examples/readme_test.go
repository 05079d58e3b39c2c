package examples_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/sbomexec/sbomexectest"
	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
	"github.com/ferrypkg/ferry/internal/testsupport/quickstart"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestQuickstartWithoutCluster runs the README's quickstart, as a user
// pastes it into bash, up to `ferry init` (the rest needs a cluster:
// e2e/quickstart_test.go runs it whole): the definition written, create,
// key generate, sign, push to a registry. The only changes are the values
// of the variables the block declares (REGISTRY, IMAGE): an in-process
// registry, serving a generated image. Then what was pushed is pulled
// with the key, byte for byte the archive create wrote, and inspected.
func TestQuickstartWithoutCluster(t *testing.T) {
	script, err := quickstart.Script("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, _, found := strings.Cut(script, "\nferry init")
	if !found {
		t.Fatal("the quickstart has no `ferry init` line to stop before")
	}
	reg := registrytest.New(t)
	image := reg + "/library/nginx:1.27"
	desc := serveImage(t, reg, "library/nginx", "1.27")
	if before, err = quickstart.SetVariables(before, map[string]string{"REGISTRY": reg, "IMAGE": image}); err != nil {
		t.Fatal(err)
	}

	bin := buildFerry(t)
	work := t.TempDir()
	env := append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"COSIGN_PASSWORD=quickstart", // ferry key generate and sign ask on a terminal otherwise
		"DOCKER_CONFIG="+t.TempDir(), // no credentials of this machine
		"KUBECONFIG="+filepath.Join(work, "no-cluster"),
	)
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", before)
	cmd.Dir, cmd.Env = work, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the quickstart failed: %v\n%s\n--- script:\n%s", err, out, before)
	}
	t.Logf("TIMING quickstart up to ferry init: %.1fs", time.Since(start).Seconds())

	ferry := func(args ...string) string {
		t.Helper()
		c := exec.CommandContext(t.Context(), filepath.Join(bin, "ferry"), args...)
		c.Dir, c.Env = filepath.Join(work, "hello"), env
		out, err := c.Output()
		if err != nil {
			t.Fatalf("ferry %s: %v: %s", strings.Join(args, " "), err, stderr(err))
		}
		return string(out)
	}
	ref := reg + "/hello:1.0.0"
	ferry("package", "pull", ref, "-f", "pulled.tar.zst", "--key", "cosign.pub")
	created, err := os.ReadFile(filepath.Join(work, "hello", "hello-1.0.0.tar.zst"))
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := os.ReadFile(filepath.Join(work, "hello", "pulled.tar.zst"))
	if err != nil || !bytes.Equal(created, pulled) {
		t.Fatalf("pulled %d bytes (%v), not the %d create wrote", len(pulled), err, len(created))
	}
	var rep artifact.Report
	if err := json.Unmarshal([]byte(ferry("package", "inspect", ref, "--key", "cosign.pub", "-o", "json")), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Name != "hello" || rep.Version != "1.0.0" || !rep.Signed || len(rep.Components) != 1 {
		t.Fatalf("inspect: %+v", rep)
	}
	c := rep.Components[0]
	if len(c.Images) != 1 || c.Images[0].Ref != image || c.Images[0].Digest != desc.Digest ||
		len(c.Images[0].SBOMs) != 1 || len(c.Manifests) != 1 || c.Manifests[0].Files[0] != "web.yaml" {
		t.Fatalf("the package holds %+v, want %s by %s with its SBOM and web.yaml", c, image, desc.Digest)
	}
}

// serveImage pushes a generated single-platform image (the host's, the
// quickstart's default platform) to reg as repo:tag.
func serveImage(t *testing.T, reg, repo, tag string) ocispec.Descriptor {
	t.Helper()
	dst, err := remote.NewRepository(reg + "/" + repo)
	if err != nil {
		t.Fatal(err)
	}
	dst.PlainHTTP = true
	rng := fixture.Rand(30)
	desc, err := fixture.PushImage(t.Context(), dst, fixture.Platform("linux", runtime.GOARCH, ""), []fixture.Layer{fixture.NewLayer(rng, 64<<10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Tag(t.Context(), desc, tag); err != nil {
		t.Fatal(err)
	}
	return desc
}

// buildFerry builds what a release installs in one folder: the front
// binary ferry, ferry-full beside it, and the SBOM helper ferry-sbom.
func buildFerry(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"-o", filepath.Join(dir, "ferry-full"), "../cmd/ferry"},
		{"-o", filepath.Join(dir, "ferry"), "../cmd/ferry/front"},
	} {
		cmd := exec.CommandContext(t.Context(), "go", append([]string{"build"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", args, err, out)
		}
	}
	if _, err := sbomexectest.Build(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func stderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return fmt.Sprint(err)
}
