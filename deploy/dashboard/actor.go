package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
)

// actor is one identity in one cluster: the kubeconfig's, or a logged-in
// token's. Its clients and its way to the registry are kept between
// requests.
type actor struct {
	cluster string
	cfg     *rest.Config
	cs      kubernetes.Interface
	pc      client.WithWatch
	dyn     dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper

	regMu sync.Mutex
	ep    *reach.Endpoint
	reg   *remote.Registry

	scanMu    sync.Mutex
	last      *scan       // the last scan of the cluster's SBOMs
	lastDB    *deployedDB // the advisory database last found deployed
	fleetScan *scan       // the last scan of the fleet's SBOMs (the centre's)
	fleetDB   *deployedDB // the fleet's advisory database last found

	fleetMu sync.Mutex
	fc      client.WithWatch // the management cluster's fleet objects
	acts    fleetActions     // the centre's verbs over fc
	who     string           // the kubeconfig's user, as the API server names it
}

// actor returns the request's actor in cluster c: the kubeconfig's
// credentials, or (with Login) the session's token and nothing else of
// the kubeconfig's.
func (s *Server) actor(r *http.Request, c Cluster) (*actor, error) {
	sess := sessionOf(r)
	key := c.Name + "\x00"
	cfg := rest.CopyConfig(c.Config)
	if s.opts.Login {
		if sess.token == "" {
			return nil, fmt.Errorf("log in first")
		}
		key += sess.id
		cfg = rest.AnonymousClientConfig(c.Config)
		cfg.BearerToken = sess.token
	}
	s.mu.Lock()
	a := s.actors[key]
	s.mu.Unlock()
	if a != nil {
		return a, nil
	}
	cfg.QPS, cfg.Burst = 50, 100
	a = &actor{cluster: c.Name, cfg: cfg}
	var err error
	if a.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if a.pc, err = deploy.PackageClient(cfg); err != nil {
		return nil, err
	}
	if a.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	a.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	s.mu.Lock()
	if b := s.actors[key]; b != nil {
		a = b
	} else {
		s.actors[key] = a
	}
	s.mu.Unlock()
	return a, nil
}

// registry returns a client of the in-cluster registry, opening the way
// to it (NodePort, else a tunnel) on first use with the actor's
// credentials: reading the registry's account takes leave to read
// ferry's Secrets, the tunnel leave to port-forward.
func (a *actor) registry(ctx context.Context, ns string) (*remote.Registry, *reach.Endpoint, error) {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	if a.reg != nil && a.ep.Err() == nil {
		return a.reg, a.ep, nil
	}
	a.closeRegistry()
	_, cred, err := rollout.RegistryAccess(ctx, a.cs, ns)
	if err != nil {
		return nil, nil, err
	}
	ep, err := reach.Registry(ctx, a.cs, reach.Options{Namespace: ns, Config: a.cfg})
	if err != nil {
		return nil, nil, err
	}
	reg, err := remote.NewRegistry(ep.Host)
	if err != nil {
		_ = ep.Close()
		return nil, nil, err
	}
	reg.PlainHTTP = true
	reg.Client = &auth.Client{Client: retry.DefaultClient, Cache: auth.NewCache(), Credential: auth.StaticCredential(ep.Host, cred)}
	a.reg, a.ep = reg, ep
	return reg, ep, nil
}

func (a *actor) closeRegistry() {
	if a.ep != nil {
		_ = a.ep.Close()
	}
	a.reg, a.ep = nil, nil
}

func (a *actor) close() {
	a.regMu.Lock()
	defer a.regMu.Unlock()
	a.closeRegistry()
}
