package deploy

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/registry/mirror"
)

// ErrUnsigned means a package was refused for want of a key to verify it.
var ErrUnsigned = errors.New("refusing to deploy without signature verification: pass --key, or --insecure-skip-signature-verification")

// Options configure Deploy.
type Options struct {
	// Namespace is ferry's namespace; inject.DefaultNamespace if empty.
	Namespace string
	// Keys verify the package's signature; required unless
	// InsecureSkipSignatureVerification.
	Keys []*artifact.PublicKey
	// InsecureSkipSignatureVerification deploys unsigned packages (every
	// blob is still re-hashed).
	InsecureSkipSignatureVerification bool
	// Progress, if set, receives progress reports.
	Progress artifact.ProgressFunc
}

// Deploy verifies a package, fail closed, then pushes its images into the
// in-cluster registry that `ferry init` set up — under their original
// paths, by the digests the package recorded, skipping blobs already there —
// and records the package for list, remove and the agent.
//
// Charts and manifests are not installed yet (issue 8).
func Deploy(ctx context.Context, cs kubernetes.Interface, r *artifact.Reader, opts Options) (*Record, error) {
	if opts.Namespace == "" {
		opts.Namespace = inject.DefaultNamespace
	}
	switch {
	case len(opts.Keys) > 0:
		if _, err := artifact.Verify(ctx, r, artifact.VerifyOptions{Keys: opts.Keys, Progress: opts.Progress}); err != nil {
			return nil, err
		}
	case opts.InsecureSkipSignatureVerification:
		if _, err := artifact.Inspect(ctx, r, opts.Progress); err != nil {
			return nil, err
		}
	default:
		return nil, ErrUnsigned
	}
	host, cred, err := registryAccess(ctx, cs, opts.Namespace)
	if err != nil {
		return nil, err
	}
	remote := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(host, cred)}
	if _, err := mirror.Load(ctx, host, r, remote); err != nil {
		return nil, fmt.Errorf("push images to %s: %w", host, err)
	}
	rec := &Record{Name: r.Config.Name, Version: r.Config.Version, Root: r.Root.Digest, Config: r.Config}
	for _, c := range r.Config.Components {
		rec.Components = append(rec.Components, c.Name)
	}
	if err := (&State{Client: cs, Namespace: opts.Namespace}).Save(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// registryAccess reads where the in-cluster registry is and its account.
func registryAccess(ctx context.Context, cs kubernetes.Interface, ns string) (string, auth.Credential, error) {
	state, err := cs.CoreV1().Secrets(ns).Get(ctx, inject.StateName, metav1.GetOptions{})
	if err != nil {
		return "", auth.Credential{}, fmt.Errorf("no in-cluster registry (run `ferry init`): %w", err)
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, inject.AuthSecretName, metav1.GetOptions{})
	if err != nil {
		return "", auth.Credential{}, fmt.Errorf("registry credentials: %w", err)
	}
	return string(state.Data["registry"]), auth.Credential{Username: string(sec.Data["username"]), Password: string(sec.Data["password"])}, nil
}
