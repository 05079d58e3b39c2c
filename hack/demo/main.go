// Command demo writes a sample package definition with locally generated
// sources (no network): an OCI layout holding a multi-platform image and a
// single-platform one that share a layer, a Helm chart folder, Kubernetes
// manifests, a plain file, and a git repository (made with go-git). The
// multi-platform image runs: each platform
// holds a static build of a small standard-library program (the e2e
// cluster's tiny, at /app), so the README's demo can deploy it.
//
//	go run ./hack/demo DIR    write the sources into DIR
//	go run ./hack/demo pods   print the Pods that run images of the
//	                          in-cluster registry (KUBECONFIG), with the
//	                          digests their nodes pulled
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content/oci"

	"github.com/ferrypkg/ferry/internal/testsupport/fixture"
)

const definition = `apiVersion: ferry.dev/v1alpha1
kind: Package
metadata:
  name: demo
  version: 1.0.0
  description: ferry's demo package, generated locally
platforms: [linux/amd64]
components:
  - name: app
    description: a web app with its chart, config and settings file
    images:
      - ref: docker.io/library/app:1.0
        layout: images
      - ref: docker.io/library/sidecar:2.1
        layout: images
    charts:
      - path: charts/app
    manifests:
      - name: app-config
        files: [manifests]
    files:
      - source: files/app.conf
        target: /etc/app/app.conf
  - name: gitops
    description: the cluster's GitOps repository, pinned to one commit
    repositories:
      - url: https://git.example.com/platform/fleet.git
        path: fleet
        ref: main
`

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: demo DIR | demo pods")
		os.Exit(2)
	}
	run := write
	if os.Args[1] == "pods" {
		run = func(ctx context.Context, _ string) error { return pods(ctx, os.Stdout) }
	}
	if err := run(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func write(ctx context.Context, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	store, err := oci.New(filepath.Join(dir, "images"))
	if err != nil {
		return err
	}
	rng := fixture.Rand(2026)
	base := fixture.NewLayer(rng, 2<<20)
	amd, arm := fixture.Platform("linux", "amd64", ""), fixture.Platform("linux", "arm64", "v8")
	var apps []ocispec.Descriptor
	for _, p := range []ocispec.Platform{amd, arm} {
		prog, err := program(ctx, p.Architecture)
		if err != nil {
			return err
		}
		layers := []fixture.Layer{base, fixture.FileLayer("app", prog, 0o755), fixture.NewLayer(rng, 1<<20)}
		d, err := fixture.PushImage(ctx, store, p, layers)
		if err != nil {
			return err
		}
		d.Platform = &p
		apps = append(apps, d)
	}
	app, err := fixture.PushIndex(ctx, store, apps)
	if err != nil {
		return err
	}
	if err := store.Tag(ctx, app, "1.0"); err != nil {
		return err
	}
	sidecar, err := fixture.PushImage(ctx, store, amd, []fixture.Layer{base, fixture.NewLayer(rng, 512<<10)})
	if err != nil {
		return err
	}
	if err := store.Tag(ctx, sidecar, "2.1"); err != nil {
		return err
	}
	if _, err := fixture.Chart(filepath.Join(dir, "charts"), "app", "0.1.0", "docker.io/library/app:1.0"); err != nil {
		return err
	}
	if err := fleet(filepath.Join(dir, "fleet")); err != nil {
		return err
	}
	files := map[string]string{
		"manifests/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app-settings\ndata:\n  greeting: hello from ferry\n",
		"files/app.conf":           "listen = 0.0.0.0:8080\n",
		"ferry.yaml":               definition,
	}
	for rel, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// program builds the demo's workload for linux/arch, static and
// reproducible (the same source and Go give the same bytes).
func program(ctx context.Context, arch string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "ferry-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "app")
	gobin := os.Getenv("GO")
	if gobin == "" {
		gobin = "go"
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, "github.com/ferrypkg/ferry/e2e/internal/tiny")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the demo program for linux/%s: %v: %s", arch, err, b)
	}
	return os.ReadFile(out)
}

// fleet makes the demo's git repository (with go-git: no git binary
// needed): two commits on main, at fixed times, so the same commits every
// run.
func fleet(dir string) error {
	r, err := git.PlainInitWithOptions(dir, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		return err
	}
	wt, err := r.Worktree()
	if err != nil {
		return err
	}
	for i, files := range []map[string]string{
		{"clusters/prod/kustomization.yaml": "resources: [../../apps/web]\n", "apps/web/kustomization.yaml": "resources: [deploy.yaml]\n",
			"apps/web/deploy.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"},
		{"README.md": "The fleet: what runs in each cluster.\n"},
	} {
		for rel, body := range files {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				return err
			}
			if _, err := wt.Add(rel); err != nil {
				return err
			}
		}
		sig := &object.Signature{Name: "ferry demo", Email: "demo@ferry.dev", When: time.Date(2026, 1, 1+i, 12, 0, 0, 0, time.UTC)}
		if _, err := wt.Commit(fmt.Sprintf("fleet, step %d", i+1), &git.CommitOptions{Author: sig, Committer: sig}); err != nil {
			return err
		}
	}
	return nil
}
