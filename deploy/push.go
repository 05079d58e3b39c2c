package deploy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// ErrUnsigned means a package was refused for want of a key to verify it.
var ErrUnsigned = errors.New("refusing to deploy without signature verification")

// DefaultTimeout bounds the wait for each chart's and bundle's resources
// (the controller's, rollout.DefaultTimeout).
const DefaultTimeout = rollout.DefaultTimeout

// Pushed tells what a deploy pushed.
type Pushed struct {
	*artifact.MirrorResult
	// Took is how long the push took.
	Took time.Duration `json:"-"`
}

// push pushes a verified package into the in-cluster registry that
// `ferry init` set up: the package under its name with its signatures, its
// images under their original paths by the digests it recorded, skipping
// blobs already there. via is where this process reaches the registry
// ("" for its address on the nodes); a broken connection is retried
// attempts times.
func push(ctx context.Context, cs kubernetes.Interface, r *artifact.Reader, ns, via string, attempts int, progress artifact.ProgressFunc) (*Pushed, error) {
	host, cred, err := rollout.RegistryAccess(ctx, cs, ns)
	if err != nil {
		return nil, err
	}
	if via != "" {
		host = via
	}
	remote := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred), Client: reach.RegistryClient()}
	start := time.Now()
	var loaded *artifact.MirrorResult
	err = reach.Retry(ctx, attempts, func() error {
		var err error
		loaded, err = artifact.Mirror(ctx, r, host, artifact.MirrorOptions{Remote: remote, Progress: progress})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("push images to %s: %w", host, err)
	}
	return &Pushed{MirrorResult: loaded, Took: time.Since(start)}, nil
}

// ParseSet parses chart values given as helm --set takes them.
func ParseSet(set []string) (map[string]any, error) {
	values := map[string]any{}
	for _, s := range set {
		if err := strvals.ParseInto(s, values); err != nil {
			return nil, fmt.Errorf("chart value %q: %w", s, err)
		}
	}
	return values, nil
}
