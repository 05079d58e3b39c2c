package install

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/deploy/servingcert"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// newInstaller is an installer for opts (defaults set) in its namespace,
// which must exist.
func newInstaller(ctx context.Context, cs kubernetes.Interface, opts InstallOptions) (*installer, error) {
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.WaitTimeout == 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	in := &installer{cs: cs, opts: opts, ns: opts.Namespace}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, in.ns, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", in.ns, cluster.NotSetUp(err))
	}
	// The cluster-wide objects go with ferry's namespace.
	in.owner = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: in.ns, UID: ns.UID}}
	return in, nil
}

// Prepared is what Prepare made: the agent's certificates (kept or
// renewed).
type Prepared struct {
	certs servingcert.Ensured
}

// Prepare makes the agent's objects that neither name its image nor need
// the registry, in opts.Namespace, which must exist: its certificates, CA
// ConfigMap, RBAC and Service; the Package CRD, established, and the
// controller's account; the git server's Service. Init runs it while the
// registry is bootstrapped, so that Install, after, only rolls out.
func Prepare(ctx context.Context, cs kubernetes.Interface, opts InstallOptions) (*Prepared, error) {
	in, err := newInstaller(ctx, cs, opts)
	if err != nil {
		return nil, err
	}
	return in.prepare(ctx)
}

func (in *installer) prepare(ctx context.Context) (*Prepared, error) {
	var (
		wg             sync.WaitGroup
		crdErr, gitErr error
		certs          servingcert.Ensured
		err            error
	)
	wg.Go(func() { crdErr = in.controllerObjects(ctx) })
	wg.Go(func() { gitErr = in.gitService(ctx) })
	certs, err = in.objects(ctx)
	wg.Wait()
	if err := errors.Join(err, crdErr, gitErr); err != nil {
		return nil, err
	}
	return &Prepared{certs: certs}, nil
}
