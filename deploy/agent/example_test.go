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
