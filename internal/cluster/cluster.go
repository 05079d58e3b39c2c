// Package cluster is the contract between ferry's commands and what they
// leave in a Kubernetes cluster: the names of the objects in ferry's
// namespace, the labels that mark them, the registry's ports and paths, and
// the schema of the Secrets that later commands read back (State, Account).
// Package inject (ferry init) writes it; deploy and deploy/agent read it.
// What only one package uses stays there: the injector's objects in inject,
// the agent's in deploy/agent, the deployed packages' records in deploy.
//
// It holds no clients: ReadRegistry reads through the one method it needs.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultNamespace is ferry's namespace: the registry, its Secrets, the
// agent and the deployed packages' records.
const DefaultNamespace = "ferry"

// Names of what ferry init leaves in ferry's namespace.
const (
	// RegistryName names the registry's Deployment and NodePort Service.
	RegistryName = "ferry-registry"
	// AuthSecretName holds the registry account (see Account).
	AuthSecretName = "ferry-registry-auth"
	// PullSecretName is a kubernetes.io/dockerconfigjson Secret for the
	// registry at RegistryHost, copied into the namespaces that pull from it.
	PullSecretName = "ferry-registry-pull"
	// StateName holds what init set up, for later commands (see State).
	StateName = "ferry-state"
	// ControllerName names the Package controller's Deployment and
	// ServiceAccount in ferry's namespace, its leader-election Lease, and
	// its ClusterRoleBinding.
	ControllerName = "ferry-controller"
	// SBOMIndexName is the ConfigMap pinning the SBOM index a search
	// saved in the registry (key SBOMIndexKey, the index manifest's
	// digest), in ferry's namespace and in a fleet centre's: an index
	// pushed to the registry by anyone who may not write it is not read.
	SBOMIndexName = "ferry-sbom-index"
	SBOMIndexKey  = "digest"
)

// The in-cluster registry.
const (
	// RegistryPort is the registry's container port (and the injector's,
	// which stands in for it during init).
	RegistryPort = 5000
	// DefaultNodePort is where the registry answers on every node.
	DefaultNodePort = 31999
	// RegistryBinaryPath is where the registry binary sits in its image.
	RegistryBinaryPath = "/ferry-registry"
	// RegistryRoot is the registry's storage inside its container.
	RegistryRoot = "/var/lib/registry"
	// StorageEnv, set in the registry's container, is its S3 storage:
	// s3://bucket[/prefix]?endpoint=…&region=…&path-style=…, without
	// credentials. Unset: the filesystem at RegistryRoot. `ferry-registry`
	// and `ferry-registry gc` read it.
	StorageEnv = "FERRY_REGISTRY_STORAGE"
	// HTTPSecretEnv is the HTTP secret every replica signs upload state
	// with, from the AuthSecretName Secret's HTTPSecretKey.
	HTTPSecretEnv = "FERRY_REGISTRY_HTTP_SECRET"
	// HTTPSecretKey is the key of the registry replicas' shared HTTP
	// secret in the AuthSecretName Secret.
	HTTPSecretKey = "httpSecret"
	// AccessKeyIDKey and SecretAccessKeyKey are the keys of the Secret the
	// user names for S3 storage; the registry's container gets them as the
	// AWS SDK's environment variables of the same names.
	AccessKeyIDKey     = "AWS_ACCESS_KEY_ID"
	SecretAccessKeyKey = "AWS_SECRET_ACCESS_KEY"
	// CAName is the ConfigMap with the PEM bundle of a custom CA for the S3
	// endpoint (key CAKey), mounted into the registry at CADir.
	CAName = "ferry-registry-ca"
	CAKey  = "ca.pem"
	CADir  = "/etc/ferry/ca"
)

// RegistryHost is where every node reaches the in-cluster registry on
// nodePort: 127.0.0.1:<nodePort>.
func RegistryHost(nodePort int32) string { return "127.0.0.1:" + strconv.Itoa(int(nodePort)) }

// Labels on every object ferry makes in a cluster.
const (
	// LabelName is the object's app name (RegistryName, the agent's name…).
	LabelName = "app.kubernetes.io/name"
	// LabelManagedBy is ManagedBy on everything ferry made, and on nothing
	// else: ferry updates only the copies it made of a Secret.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelComponent says which part of ferry an object belongs to:
	// "registry", "injector" or "agent".
	LabelComponent = "app.kubernetes.io/component"
	// ManagedBy is the value of LabelManagedBy.
	ManagedBy = "ferry"
	// LabelPackage marks the Secrets that record deployed packages (its
	// value is the package's name).
	LabelPackage = "ferry.dev/package"
	// LabelRevision marks a registry Pod with the image it runs (the first
	// 32 hexadecimal digits of its digest): while init replaces the
	// registry in place, its Service leads only to the new revision's
	// Pods before the old ones stop.
	LabelRevision = "ferry.dev/revision"
)

// RegistryLabels are the labels of the registry's Deployment, Pods and
// Service: its selector.
func RegistryLabels() map[string]string {
	return map[string]string{LabelName: RegistryName, LabelManagedBy: ManagedBy, LabelComponent: "registry"}
}

// Keys of the StateName Secret's data.
const (
	stateRegistry   = "registry"
	stateImage      = "image"
	stateNode       = "node"
	statePullSecret = "pullSecret"
	stateAuthSecret = "authSecret"
	stateStorage    = "storage"
	stateReplicas   = "replicas"
)

// State is what init records in the StateName Secret for later commands.
type State struct {
	// Registry is the registry's host:port on every node (RegistryHost).
	Registry string
	// Image is the registry's image, by digest, in the registry itself.
	Image string
	// Node is the node the registry runs on (its storage is there).
	Node string
	// PullSecret and AuthSecret name the registry's Secrets
	// (PullSecretName, AuthSecretName).
	PullSecret, AuthSecret string
	// Storage is the registry's S3 storage (see StorageEnv); empty: the
	// filesystem on Node.
	Storage string
	// Replicas is how many registry Pods run; 0 read as 1.
	Replicas int32
}

// Data returns s as the Secret's data.
func (s State) Data() map[string][]byte {
	return map[string][]byte{
		stateRegistry: []byte(s.Registry), stateImage: []byte(s.Image), stateNode: []byte(s.Node),
		statePullSecret: []byte(s.PullSecret), stateAuthSecret: []byte(s.AuthSecret),
		stateStorage: []byte(s.Storage), stateReplicas: []byte(strconv.Itoa(int(max(s.Replicas, 1)))),
	}
}

// StateFromData reads a State from the Secret's data; a missing key leaves
// its field empty.
func StateFromData(data map[string][]byte) State {
	return State{
		Registry: string(data[stateRegistry]), Image: string(data[stateImage]), Node: string(data[stateNode]),
		PullSecret: string(data[statePullSecret]), AuthSecret: string(data[stateAuthSecret]),
		Storage: string(data[stateStorage]), Replicas: replicas(data[stateReplicas]),
	}
}

func replicas(b []byte) int32 {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 1 {
		return 1
	}
	return int32(n)
}

// Keys of the AuthSecretName Secret's data.
const (
	accountUsername = "username"
	accountPassword = "password"
	accountHtpasswd = "htpasswd"
)

// HtpasswdKey is the key of the htpasswd file in the AuthSecretName
// Secret, mounted into the registry's pod.
const HtpasswdKey = accountHtpasswd

// Account is the registry account init generates, kept in the
// AuthSecretName Secret.
type Account struct {
	Username, Password string
	// Htpasswd is the registry's htpasswd file: Username and the bcrypt
	// hash of Password.
	Htpasswd []byte
}

// Data returns a as the Secret's data.
func (a Account) Data() map[string][]byte {
	return map[string][]byte{
		accountUsername: []byte(a.Username), accountPassword: []byte(a.Password), accountHtpasswd: a.Htpasswd,
	}
}

// AccountFromData reads an Account from the Secret's data; a missing key
// leaves its field empty.
func AccountFromData(data map[string][]byte) Account {
	return Account{Username: string(data[accountUsername]), Password: string(data[accountPassword]), Htpasswd: data[accountHtpasswd]}
}

// SecretGetter gets the Secrets of one namespace, as
// kubernetes.Interface's CoreV1().Secrets(namespace) does.
type SecretGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Secret, error)
}

// ReadRegistry reads the State and the registry Account that init left in
// ferry's namespace, whose Secrets secrets gets.
func ReadRegistry(ctx context.Context, secrets SecretGetter) (State, Account, error) {
	state, err := secrets.Get(ctx, StateName, metav1.GetOptions{})
	if err != nil {
		return State{}, Account{}, fmt.Errorf("the registry's state (Secret %s): %w", StateName, NotSetUp(err))
	}
	auth, err := secrets.Get(ctx, AuthSecretName, metav1.GetOptions{})
	if err != nil {
		return State{}, Account{}, fmt.Errorf("registry credentials: %w", err)
	}
	return StateFromData(state.Data), AccountFromData(auth.Data), nil
}

// The agent's HTTPS server (the admission webhook).
const (
	// AgentPathMutate is where the API server sends AdmissionReviews.
	AgentPathMutate = "/mutate"
	// AgentPathHealth answers 200 when the agent can decide (readiness).
	AgentPathHealth = "/healthz"
)

// The API groups of the GitOps sources the agent rewrites.
const (
	FluxGroup = "source.toolkit.fluxcd.io"
	ArgoGroup = "argoproj.io"
)

// GitBaseURL is the in-cluster git server's base URL for its Service's
// host:port: http://<cluster IP>, the port left out when 80 (an IPv6
// address keeps its brackets).
func GitBaseURL(host string) string {
	if _, port, err := net.SplitHostPort(host); err == nil && port == "80" {
		host = strings.TrimSuffix(host, ":80")
	}
	return "http://" + host
}

// The agent (package deploy/agent, installed by deploy/install), as its
// clients find it.
const (
	// AgentName names its Deployment and Service in ferry's namespace.
	AgentName = "ferry-agent"
	// AgentPort is its HTTPS port; its Service answers on 443.
	AgentPort = 8443
	// AgentCAConfigMap holds its CA certificate (key AgentCAKey), public,
	// for clients of its upload endpoint.
	AgentCAConfigMap = "ferry-agent-ca"
	AgentCAKey       = "ca.crt"
	// AgentTLSSecretName holds its CA (AgentCAKey) and serving certificate
	// and key (tls.crt, tls.key).
	AgentTLSSecretName = "ferry-agent-tls"
)

// AgentWebhookName names the agent's cluster-wide objects (its
// MutatingWebhookConfiguration, ClusterRole and ClusterRoleBinding) for
// ferry's namespace ns: AgentName for the default namespace, with the
// namespace appended for another.
func AgentWebhookName(ns string) string {
	if ns == DefaultNamespace {
		return AgentName
	}
	return AgentName + "-" + ns
}

// AgentServiceHost is the agent Service's name in namespace ns, as its
// certificate names it.
func AgentServiceHost(ns string) string { return AgentName + "." + ns + ".svc" }

// AgentLabels select the agent's Pods.
func AgentLabels() map[string]string {
	return map[string]string{LabelName: AgentName, LabelManagedBy: ManagedBy, LabelComponent: "agent"}
}

// ErrNotSetUp means a part of ferry that init sets up in the cluster is
// missing: init has not run there, or an earlier ferry's did.
var ErrNotSetUp = errors.New("missing from the cluster")

// NotSetUp wraps err, an API server's answer for one of ferry's objects,
// with ErrNotSetUp when it says the object does not exist.
func NotSetUp(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %w", ErrNotSetUp, err)
	}
	return err
}
