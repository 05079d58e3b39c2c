package agent_test

import (
	"context"
	"fmt"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/agent"
)

// packages stands for rollout.State: the configs of deployed packages.
type packages struct{ cfg *artifact.Config }

func (p packages) Packages(context.Context) ([]*artifact.Config, error) {
	return []*artifact.Config{p.cfg}, nil
}

func ExampleCache() {
	stored := digest.FromString("the image as the package stores it")
	cache := &agent.Cache{
		Source: packages{&artifact.Config{Name: "demo", Version: "1.0.0", Components: []artifact.Component{{
			Name: "web", Images: []artifact.Image{{Ref: "docker.io/library/app:1.0", Digest: stored}},
		}}}},
		Registry:     "127.0.0.1:31999",
		RequireKnown: true,
	}
	rw, err := cache.Rewriter(context.Background())
	if err != nil {
		panic(err)
	}
	for _, image := range []string{"app:1.0", "docker.io/library/app:1.0", "127.0.0.1:31999/library/app@" + stored.String(), "nginx:1.27"} {
		got, err := rw.Rewrite(image)
		fmt.Println(got == "127.0.0.1:31999/library/app@"+stored.String(), err)
	}
	// Output:
	// true <nil>
	// true <nil>
	// true <nil>
	// false image is in no deployed package: nginx:1.27
}

func ExampleSourceRewriter_Rewrite() {
	s := &agent.SourceRewriter{
		GitBase: "http://10.96.0.40", Registry: "10.96.0.20:5000", ArgoSecret: "ferry-git-creds",
		Repositories: agent.Repositories{}, Images: agent.Images{},
	}
	s.Repositories.Add(&artifact.Config{Components: []artifact.Component{{Repositories: []artifact.Repository{{
		URL: "https://github.com/example/fleet.git", Key: "github.com/example/fleet", Path: "example/fleet",
		Ref: "refs/heads/main", Commit: "0123456789abcdef0123456789abcdef01234567",
	}}}}})
	if err := s.Images.Add(&artifact.Config{Components: []artifact.Component{{Images: []artifact.Image{
		{Ref: "ghcr.io/example/charts/web:1.0.0", Digest: digest.FromString("the chart")},
	}}}}); err != nil {
		panic(err)
	}
	app := map[string]any{"spec": map[string]any{"sources": []any{
		map[string]any{"repoURL": "ghcr.io/example/charts", "chart": "web", "targetRevision": "1.0.0"},
		map[string]any{"repoURL": "https://github.com/example/fleet.git", "targetRevision": "main", "ref": "values"},
	}}}
	res, err := s.Rewrite("Application", app)
	if err != nil {
		panic(err)
	}
	for _, src := range app["spec"].(map[string]any)["sources"].([]any) {
		src := src.(map[string]any)
		fmt.Println(src["repoURL"], src["targetRevision"])
	}
	fmt.Println(res.Secrets, res.HelmRepositories, agent.HelmRepositoryName(res.HelmRepositories[0]))
	// Output:
	// 10.96.0.20:5000/example/charts 1.0.0
	// http://10.96.0.40/github.com/example/fleet.git main
	// [ferry-git-creds] [10.96.0.20:5000/example/charts] ferry-helm-6672c9e89e32d239
}
