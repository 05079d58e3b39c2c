// Package install sets ferry up in a cluster: Init is what `ferry init`
// runs — the registry's bootstrap (package inject), the registry's own
// image pushed into it, the agent, the webhook, the Package controller and
// the git server (Install), and the Packages of
// what an earlier ferry deployed without one.
package install

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/internal/unreachable"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Init is `ferry init` (set the fields, then Run). Running it again checks
// and repairs; it does not fail on what is there already.
type Init struct {
	// Client and Config reach the cluster (Config for tunnels and the
	// Package and CRD clients); Kube reaches it for Helm (the values of
	// releases an earlier ferry installed, when it migrates them).
	Client kubernetes.Interface
	Config *rest.Config
	Kube   genericclioptions.RESTClientGetter
	// Registry configures the registry's bootstrap; its Namespace, BinDir,
	// WaitTimeout and Via are the agent's too.
	Registry inject.InitOptions
	// Agent configures the agent, webhook, controller and git server
	// (Namespace, BinDir, WaitTimeout, Registry and Extensions are set
	// from the rest).
	Agent InstallOptions
	// Keys are PEM public keys the cluster trusts: each is stored in a
	// Secret of ferry's namespace; they verify uploads to the agent, and
	// the Packages given to what an earlier ferry deployed name them.
	Keys [][]byte
	// Version is this ferry's version and commit (its Generation is
	// cluster.FormatGeneration, whatever it says): init refuses a cluster
	// whose recorded formats are newer (a *cluster.DowngradeError), and
	// records it in the cluster.VersionName ConfigMap.
	Version cluster.Ferry
	// AllowDowngrade lets init run on a cluster whose formats are newer
	// than this ferry's.
	AllowDowngrade bool
	// Progress, if set, is told of each step as it finishes.
	Progress func(inject.Step)
}

// Result is what Init set up.
type Result struct {
	*inject.InitResult
	// Agent is the agent's image, by digest.
	Agent string `json:"agent"`
	// RegistryVia is how this process reached the registry.
	RegistryVia *reach.Endpoint `json:"registryVia"`
	Seconds     float64         `json:"seconds"`
	// Migrated are the packages given a Package.
	Migrated []string `json:"migrated"`
	// Formats is what the cluster records of the ferrys that set it up
	// and ran init last (this one), and Upgraded the format generations
	// this init migrated it to.
	Formats  cluster.Setup `json:"formats"`
	Upgraded []int         `json:"upgraded,omitempty"`
	// Installed is what the agent's installation did.
	Installed *InstallResult `json:"-"`
	// Steps are the steps Progress was told of, in the order they ended:
	// where the time went.
	Steps []Step `json:"steps"`
}

// Step is one step of Init, as it ended.
type Step struct {
	Name    string  `json:"name"`
	Detail  string  `json:"detail"`
	Seconds float64 `json:"seconds"`
}

// StepError says which step of Init failed: "init: <step>: <cause>". The
// registry's bootstrap reports its own steps (inject.StepError).
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string {
	return "init: " + e.Step + ": " + unreachable.Said(e.Err).Error()
}
func (e *StepError) Unwrap() error { return e.Err }

// Run bootstraps the registry, pushes its image into it (so that a replica
// rescheduled on another node pulls it from the others), installs the
// agent (whose image the registry serves) and gives the packages an
// earlier ferry deployed their Packages.
func (in *Init) Run(ctx context.Context) (*Result, error) {
	// Every step is told of from this goroutine, in turn.
	var steps []Step
	run := *in
	run.Progress = func(s inject.Step) {
		steps = append(steps, Step{Name: s.Name, Detail: s.Detail, Seconds: s.Took.Seconds()})
		if in.Progress != nil {
			in.Progress(s)
		}
	}
	out, err := run.run(ctx)
	if out != nil {
		out.Steps = steps
	}
	return out, err
}

func (in *Init) run(ctx context.Context) (*Result, error) {
	opts := in.Registry
	if opts.Namespace == "" {
		opts.Namespace = cluster.DefaultNamespace
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = inject.DefaultWaitTimeout
	}
	opts.Progress = in.Progress
	opts.Config = in.Config
	// A refused init (a downgrade) changes nothing: read before anything.
	found, err := in.readFormats(ctx, opts.Namespace)
	if err != nil {
		return nil, &StepError{Step: "formats", Err: err}
	}
	// The injector's Pod goes while the agent is installed.
	opts.DeferInjectorWait = true
	// On a node, the agent's image goes to the registry Pod during the
	// hand-over (kube-proxy's second); Install's push then finds it.
	early := &earlyPush{done: make(chan struct{})}
	opts.RegistryReady = func(addr, arch string) {
		early.start(ctx, in.Client, opts.Namespace, in.Agent.Ferry, opts.BinDir, addr, arch)
	}
	defer early.wait(context.Background())
	// The agent's objects that need neither the registry nor its image are
	// made while the registry is bootstrapped, once the namespace is there.
	ao := in.Agent
	ao.Namespace, ao.BinDir, ao.WaitTimeout = opts.Namespace, opts.BinDir, opts.WaitTimeout
	if ao.Extensions == nil {
		var err error
		if ao.Extensions, err = apiextensionsclient.NewForConfig(in.Config); err != nil {
			return nil, &StepError{Step: "agent", Err: err}
		}
	}
	// Run once: in the background from the namespace step on, or by
	// Install's wait for it; a later caller waits for the first. On
	// return it is cancelled and waited for (begun then, with its context
	// cancelled, it ends at its first request).
	prepCtx, cancelPrep := context.WithCancel(ctx)
	prepOpts := ao // ao gains the registry's address and hooks meanwhile
	prepare := sync.OnceValues(func() (*Prepared, error) { return Prepare(prepCtx, in.Client, prepOpts) })
	defer func() { cancelPrep(); _, _ = prepare() }()
	opts.NamespaceReady = func() { go prepare() }
	ao.prepared = func(context.Context) (*Prepared, error) { return prepare() }
	start := time.Now()
	res, err := inject.Init(ctx, in.Client, opts)
	early.none()
	if err != nil {
		return nil, err
	}
	out := &Result{InitResult: res}

	agentStart := time.Now()
	ep, err := reach.Registry(ctx, in.Client, reach.Options{Via: opts.Via, Namespace: opts.Namespace, Config: in.Config, NodeHost: res.Registry})
	if err != nil {
		return nil, &StepError{Step: "agent", Err: err}
	}
	defer ep.Close()
	out.RegistryVia = ep
	in.progress("registry via", ep.String(), agentStart)

	// The registry's own image goes into the registry while the agent
	// rolls out (neither needs the other), once the agent's image is in:
	// the rollout waits for that one, so it goes alone.
	var (
		imgWG   sync.WaitGroup
		imgDesc ocispec.Descriptor
		imgErr  error
		imgTook time.Duration
		imgOnce sync.Once
	)
	pushImage := func() {
		imgOnce.Do(func() {
			imgWG.Go(func() {
				imgStart := time.Now()
				imgDesc, imgErr = inject.PushRegistryImage(ctx, in.Client, opts.Namespace, ep.Host, opts.BinDir, res.Arch)
				imgTook = time.Since(imgStart)
			})
		})
	}
	defer imgWG.Wait()

	ao.imagePushed, ao.beforePush, ao.Registry = pushImage, early.wait, ep.Host
	installed, err := Install(ctx, in.Client, ao)
	pushImage() // when Install failed before its image was in
	imgWG.Wait()
	if imgErr != nil {
		return nil, &StepError{Step: "registry image", Err: imgErr}
	}
	if !strings.HasSuffix(res.Image, "@"+imgDesc.Digest.String()) {
		return nil, &StepError{Step: "registry image", Err: fmt.Errorf("pushed %s, the registry runs %s", imgDesc.Digest, res.Image)}
	}
	if in.Progress != nil {
		in.Progress(inject.Step{Name: "registry image", Detail: "in the registry as " + inject.RegistryRepository, Took: imgTook})
	}
	if err != nil {
		return nil, &StepError{Step: "agent", Err: err}
	}
	out.Agent, out.Installed = installed.Image, installed
	in.progress("agent", installed.String(), agentStart)

	goneStart := time.Now()
	if err := res.WaitCleanup(ctx); err != nil {
		return nil, &StepError{Step: "clean-up", Err: err}
	}
	if res.Injected {
		in.progress("clean-up", "no injector objects left", goneStart)
	}

	migrateStart := time.Now()
	if out.Upgraded, err = in.migrateFormats(ctx, opts.Namespace, found); err != nil {
		return nil, &StepError{Step: "formats", Err: err}
	}
	if out.Formats, err = in.recordFormats(ctx, opts.Namespace, found); err != nil {
		return nil, &StepError{Step: "formats", Err: err}
	}
	in.progress("formats", formatsDetail(found, out.Formats, out.Upgraded), migrateStart)
	migrateStart = time.Now()
	if out.Migrated, err = in.migrate(ctx, opts.Namespace); err != nil {
		return nil, &StepError{Step: "migrate", Err: err}
	}
	if len(out.Migrated) > 0 {
		in.progress("migrate", "Packages for "+strings.Join(out.Migrated, ", "), migrateStart)
	}
	out.Seconds = time.Since(start).Seconds()
	return out, nil
}

// earlyPush is the agent image's push to the registry Pod during the
// hand-over: best effort, bounded by earlyPushTimeout (Install's own push
// does whatever it left).
type earlyPush struct {
	once sync.Once
	done chan struct{}
}

// earlyPushTimeout bounds the early push: 98 MB on a node's own network.
const earlyPushTimeout = 30 * time.Second

// start pushes, in the background, the agent's image to the registry at
// addr, with the account in ns.
func (e *earlyPush) start(ctx context.Context, cs kubernetes.Interface, ns, ferry, binDir, addr, arch string) {
	e.once.Do(func() {
		go func() {
			defer close(e.done)
			ctx, cancel := context.WithTimeout(ctx, earlyPushTimeout)
			defer cancel()
			path, err := FindBinary(ferry, binDir, arch)
			if err != nil {
				return
			}
			sec, err := cs.CoreV1().Secrets(ns).Get(ctx, cluster.AuthSecretName, metav1.GetOptions{})
			if err != nil {
				return
			}
			account := cluster.AccountFromData(sec.Data)
			if err := reach.WaitRegistry(ctx, addr, time.Second); err != nil {
				return // the Pod's address does not answer here
			}
			repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(addr, auth.Credential{Username: account.Username, Password: account.Password}), Client: reach.RegistryClient()}.Repository(addr + "/" + Repository)
			if err != nil {
				return
			}
			_, _ = pushAgentImage(ctx, repo, path, arch) // best effort: Install pushes what is missing
		}()
	})
}

// none marks that no early push starts any more.
func (e *earlyPush) none() {
	e.once.Do(func() { close(e.done) })
}

// wait waits for the early push, if any, to end, or ctx.
func (e *earlyPush) wait(ctx context.Context) {
	select {
	case <-e.done:
	case <-ctx.Done():
	}
}

func (in *Init) progress(step, detail string, since time.Time) {
	if in.Progress != nil {
		in.Progress(inject.Step{Name: step, Detail: detail, Took: time.Since(since)})
	}
}

// migrate stores the trusted keys and gives the packages an earlier ferry
// deployed their Packages, naming those keys.
func (in *Init) migrate(ctx context.Context, ns string) ([]string, error) {
	pc, err := deploy.PackageClient(in.Config)
	if err != nil {
		return nil, err
	}
	refs := []v1alpha1.KeyReference{}
	for _, pem := range in.Keys {
		ref, err := deploy.EnsureKeySecret(ctx, in.Client, ns, pem)
		if err != nil {
			return nil, err
		}
		refs = append(refs, ref)
	}
	migrated, err := deploy.Migrate(ctx, in.Client, pc, in.Kube, ns, refs)
	if migrated == nil {
		migrated = []string{}
	}
	return migrated, err
}
