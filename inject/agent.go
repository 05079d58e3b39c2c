package inject

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
)

// The agent: ferry's mutating admission webhook (`ferry agent`, see
// deploy/agent), which init runs from ferry's own image.
const (
	// AgentName names the agent's Deployment, Service, ServiceAccount, Role
	// and RoleBinding in ferry's namespace, and, for the default namespace,
	// its ClusterRole, ClusterRoleBinding and MutatingWebhookConfiguration.
	AgentName = "ferry-agent"
	// AgentTLSSecretName holds the agent's CA (ca.crt) and serving
	// certificate and key (tls.crt, tls.key), generated once by init.
	AgentTLSSecretName = "ferry-agent-tls"
	// AgentRepository is where init pushes the agent's image.
	AgentRepository = "ferry/agent"
	// AgentBinaryPath is where the ferry binary sits in the agent's image.
	AgentBinaryPath = "/ferry"
	// AgentPort is the agent's HTTPS port; its Service answers on 443.
	AgentPort = 8443
	// AgentIgnoreLabel set to AgentIgnoreValue on a namespace keeps the
	// agent away from its Pods: their images are neither rewritten nor
	// refused (kubectl label namespace NAME ferry.dev/agent=ignore).
	AgentIgnoreLabel = "ferry.dev/agent"
	// AgentIgnoreValue is the value of AgentIgnoreLabel that means ignore.
	AgentIgnoreValue = "ignore"
	// AgentSystemNamespace is left alone too, like ferry's own namespace:
	// the cluster's own Pods (network, DNS) must start when the agent
	// cannot, or the agent could never start again.
	AgentSystemNamespace = "kube-system"
	// agentPath is deploy/agent.PathMutate.
	agentPath = "/mutate"
	// agentTLSAnnotation on the agent's pod template rolls its pods when
	// the certificate changes.
	agentTLSAnnotation = "ferry.dev/tls-sha256"
	// agentRenewBefore: a certificate expiring sooner is replaced by init.
	agentRenewBefore = 365 * 24 * time.Hour
	agentValidity    = 10 * 365 * 24 * time.Hour
)

// AgentFileName is the file name, in InitOptions.BinDir, of a static ferry
// binary for linux/goarch, used for the agent when the ferry running init
// is not one (another OS or architecture than the node's).
func AgentFileName(goarch string) string { return "ferry-linux-" + goarch }

// agentClusterName names the agent's cluster-wide objects: AgentName for
// the default namespace, with the namespace appended for another.
func agentClusterName(ns string) string {
	if ns == DefaultNamespace {
		return AgentName
	}
	return AgentName + "-" + ns
}

// AgentBinary returns the ferry binary to build the agent's image from for
// a linux/goarch node: ferry (BinDir/ferry if empty) when it is a static
// linux/goarch executable, else BinDir/AgentFileName(goarch), which must
// be one.
func AgentBinary(ferry, binDir, goarch string) (string, error) {
	if ferry == "" {
		ferry = filepath.Join(binDir, "ferry")
	}
	errSelf := checkStatic(ferry, goarch)
	if errSelf == nil {
		return ferry, nil
	}
	other := filepath.Join(binDir, AgentFileName(goarch))
	errOther := checkStatic(other, goarch)
	if errOther == nil {
		return other, nil
	}
	return "", fmt.Errorf("no static ferry binary for linux/%s to run the agent from: %w; %w (build it with `CGO_ENABLED=0 GOOS=linux GOARCH=%s go build -trimpath -ldflags='-s -w' -o %s ./cmd/ferry`)",
		goarch, errSelf, errOther, goarch, other)
}

// checkStatic says why the file at path is not a static linux/goarch
// executable, if it is not.
func checkStatic(path, goarch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	machine := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	if machine != goarch || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%s is a %s %s, not a linux/%s executable", path, f.Type, f.Machine, goarch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// agent puts the agent in place and checks that the API server calls it:
// its image (ferry's binary, pushed to the registry), certificates, RBAC,
// Deployment, Service, then the MutatingWebhookConfiguration once it is
// Ready. Run again, it changes nothing that is right.
func (in *initRun) agent(ctx context.Context) (string, error) {
	path, err := AgentBinary(in.opts.Ferry, in.opts.BinDir, in.arch)
	if err != nil {
		return "", err
	}
	if err := WaitRegistry(ctx, in.res.Registry, in.opts.WaitTimeout); err != nil {
		return "", err
	}
	repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(in.res.Registry, in.cred)}.Repository(in.res.Registry + "/" + AgentRepository)
	if err != nil {
		return "", err
	}
	desc, err := PushImage(ctx, repo, ImageOptions{Arch: in.arch, BinaryFile: path, Path: AgentBinaryPath, Uncompressed: true})
	if err != nil {
		return "", fmt.Errorf("push the agent's image (from %s): %w", path, err)
	}
	in.res.Agent = in.res.Registry + "/" + AgentRepository + "@" + desc.Digest.String()

	tlsData, renewed, err := in.agentTLS(ctx)
	if err != nil {
		return "", err
	}
	// The cluster-wide objects go with ferry's namespace.
	owner := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Namespace", Name: in.ns, UID: in.nsUID}}
	if err := in.agentRBAC(ctx, owner); err != nil {
		return "", err
	}
	if err := in.agentService(ctx); err != nil {
		return "", err
	}
	sum := sha256.Sum256(tlsData[corev1.TLSCertKey])
	if err := applyDeployment(ctx, in.cs, in.agentDeployment(hex.EncodeToString(sum[:8]))); err != nil {
		return "", err
	}
	start := time.Now()
	if err := waitRollout(ctx, in.cs, in.ns, AgentName, in.opts.WaitTimeout); err != nil {
		return "", err
	}
	ready := time.Since(start)
	if err := in.agentWebhook(ctx, tlsData["ca.crt"], owner); err != nil {
		return "", err
	}
	check, err := in.checkAgent(ctx)
	if err != nil {
		return "", err
	}
	certs := "certificates kept"
	if renewed {
		certs = "certificates generated"
	}
	return fmt.Sprintf("%s (from %s); Deployment %s ready in %.1fs; %s; webhook %s, failurePolicy Fail: %s",
		in.res.Agent, path, AgentName, ready.Seconds(), certs, agentClusterName(in.ns), check), nil
}

// WaitRegistry waits until the registry itself answers at host: it asks
// for the account (401) where the read-only injector, which may keep the
// NodePort for a while after the hand-over, lets anyone read.
func WaitRegistry(ctx context.Context, host string, timeout time.Duration) error {
	return waitNodePort(ctx, host, http.StatusUnauthorized, "the registry", timeout)
}

// waitNodePort waits until an anonymous GET /v2/ at host answers want: a
// new Service's NodePort reaches its pod only once kube-proxy has synced
// (seconds on a fresh node), and until then the node's image pulls fail
// into a back-off of minutes.
func waitNodePort(ctx context.Context, host string, want int, what string, timeout time.Duration) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	last := "no answer"
	err := poll(ctx, timeout, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = "anonymous GET /v2/: " + resp.Status
		return resp.StatusCode == want, nil
	}, what+" at "+host+" does not answer")
	if err != nil {
		err = fmt.Errorf("%w (%s)", err, last)
	}
	return err
}

// agentTLS returns the agent's certificates, kept in AgentTLSSecretName:
// those there when still good for agentRenewBefore, new ones otherwise.
func (in *initRun) agentTLS(ctx context.Context) (map[string][]byte, bool, error) {
	secrets := in.cs.CoreV1().Secrets(in.ns)
	cur, err := secrets.Get(ctx, AgentTLSSecretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, false, err
	}
	var have map[string][]byte
	if err == nil {
		have = cur.Data
	}
	data, renewed, err := agentCertificates(have, in.ns, time.Now())
	if err != nil || !renewed {
		return data, false, err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: AgentTLSSecretName, Namespace: in.ns, Labels: agentLabels()},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
	if cur != nil && cur.Type != corev1.SecretTypeTLS { // the type cannot change
		if err := deleteAndWait(ctx, secrets, AgentTLSSecretName); err != nil {
			return nil, false, err
		}
	}
	return data, true, apply(ctx, secrets, s)
}

// agentDNSNames are the names the API server may use for the agent's Service.
func agentDNSNames(ns string) []string {
	svc := AgentName + "." + ns + ".svc"
	return []string{AgentName, AgentName + "." + ns, svc, svc + ".cluster.local"}
}

// agentCertificates returns have (ca.crt, tls.crt, tls.key) when it holds a
// serving certificate for the agent's Service in ns, issued by its CA and
// valid for agentRenewBefore after now; else a new CA and certificate
// (ECDSA P-256, valid agentValidity), and true. The CA's key is not kept:
// a new certificate comes with a new CA.
func agentCertificates(have map[string][]byte, ns string, now time.Time) (map[string][]byte, bool, error) {
	if have != nil && certificatesGood(have, ns, now) {
		return have, false, nil
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	ca := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "ferry agent CA (" + ns + ")"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(agentValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, false, err
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	names := agentDNSNames(ns)
	leaf := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[2]},
		DNSNames:     names,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(agentValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, false, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, false, err
	}
	return map[string][]byte{
		"ca.crt":                pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, true, nil
}

func certificatesGood(have map[string][]byte, ns string, now time.Time) bool {
	pair, err := tls.X509KeyPair(have[corev1.TLSCertKey], have[corev1.TLSPrivateKeyKey])
	if err != nil {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(have["ca.crt"]) {
		return false
	}
	for _, later := range []time.Time{now, now.Add(agentRenewBefore)} {
		if _, err := leaf.Verify(x509.VerifyOptions{
			DNSName: agentDNSNames(ns)[2], Roots: roots, CurrentTime: later,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			return false
		}
	}
	return true
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}

func agentLabels() map[string]string {
	return map[string]string{LabelName: AgentName, LabelManagedBy: "ferry", LabelComponent: "agent"}
}

// agentRBAC lets the agent read ferry's namespace's Secrets (the deployed
// packages' records, the pull secret) and copy the pull secret into other
// namespaces: create any Secret, get and update only those of its name.
func (in *initRun) agentRBAC(ctx context.Context, owner []metav1.OwnerReference) error {
	l := agentLabels()
	meta := metav1.ObjectMeta{Name: AgentName, Namespace: in.ns, Labels: l}
	cluster := metav1.ObjectMeta{Name: agentClusterName(in.ns), Labels: l, OwnerReferences: owner}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: AgentName, Namespace: in.ns}}
	rbac := in.cs.RbacV1()
	if err := upsert(ctx, in.cs.CoreV1().ServiceAccounts(in.ns), &corev1.ServiceAccount{ObjectMeta: meta},
		func(cur, want *corev1.ServiceAccount) { cur.Labels = want.Labels }); err != nil {
		return err
	}
	if err := upsert(ctx, rbac.Roles(in.ns), &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
	}}, func(cur, want *rbacv1.Role) { cur.Labels, cur.Rules = want.Labels, want.Rules }); err != nil {
		return err
	}
	if err := upsert(ctx, rbac.RoleBindings(in.ns), &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentName},
	}, func(cur, want *rbacv1.RoleBinding) { cur.Labels, cur.Subjects = want.Labels, want.Subjects }); err != nil {
		return err
	}
	if err := upsert(ctx, rbac.ClusterRoles(), &rbacv1.ClusterRole{ObjectMeta: cluster, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{PullSecretName}, Verbs: []string{"get", "update"}},
	}}, func(cur, want *rbacv1.ClusterRole) {
		cur.Labels, cur.OwnerReferences, cur.Rules = want.Labels, want.OwnerReferences, want.Rules
	}); err != nil {
		return err
	}
	return upsert(ctx, rbac.ClusterRoleBindings(), &rbacv1.ClusterRoleBinding{ObjectMeta: cluster, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cluster.Name},
	}, func(cur, want *rbacv1.ClusterRoleBinding) {
		cur.Labels, cur.OwnerReferences, cur.Subjects = want.Labels, want.OwnerReferences, want.Subjects
	})
}

func (in *initRun) agentService(ctx context.Context) error {
	l := agentLabels()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: in.ns, Labels: l},
		Spec: corev1.ServiceSpec{
			Selector: l,
			Ports:    []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromString("https")}},
		},
	}
	return upsert(ctx, in.cs.CoreV1().Services(in.ns), svc, func(cur, want *corev1.Service) {
		cur.Labels, cur.Spec.Selector, cur.Spec.Ports = want.Labels, want.Spec.Selector, want.Spec.Ports
	})
}

func (in *initRun) agentDeployment(tlsSum string) *appsv1.Deployment {
	l := agentLabels()
	f, t := false, true
	user := int64(65532)
	args := []string{
		"agent", "--addr=:" + strconv.Itoa(AgentPort), "--namespace=" + in.ns,
		"--tls-cert=/tls/" + corev1.TLSCertKey, "--tls-key=/tls/" + corev1.TLSPrivateKeyKey,
		"--registry=" + in.res.Registry, "--pull-secret=" + PullSecretName,
	}
	if in.opts.AgentRequireKnown {
		args = append(args, "--require-known")
	}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: AgentName, Namespace: in.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			// A new pod is Ready before the old one goes: the webhook
			// fails closed, so it must never lack an endpoint.
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l, Annotations: map[string]string{agentTLSAnnotation: tlsSum}},
				Spec: corev1.PodSpec{
					ServiceAccountName: AgentName,
					EnableServiceLinks: &f,
					ImagePullSecrets:   []corev1.LocalObjectReference{{Name: PullSecretName}},
					NodeSelector:       map[string]string{corev1.LabelOSStable: "linux", corev1.LabelArchStable: in.arch},
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: &t, RunAsUser: &user, RunAsGroup: &user, FSGroup: &user,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            "agent",
						Image:           in.res.Agent,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{AgentBinaryPath},
						Args:            args,
						Ports:           []corev1.ContainerPort{{Name: "https", ContainerPort: AgentPort, Protocol: corev1.ProtocolTCP}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}},
							PeriodSeconds: 2,
						},
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
						}},
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &f,
							Privileged:               &f,
							ReadOnlyRootFilesystem:   &t,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName:  AgentTLSSecretName,
						Items:       []corev1.KeyToPath{{Key: corev1.TLSCertKey, Path: corev1.TLSCertKey}, {Key: corev1.TLSPrivateKeyKey, Path: corev1.TLSPrivateKeyKey}},
						DefaultMode: ptr(int32(0o440)),
					}}}},
				},
			},
		},
	}
}

// agentWebhook registers the agent for Pods created, and updated when an
// image changes (an ephemeral container is added through an update of the
// pods/ephemeralcontainers subresource), outside ferry's namespace, the
// system namespace and namespaces labelled to be ignored. It fails closed.
func (in *initRun) agentWebhook(ctx context.Context, caBundle []byte, owner []metav1.OwnerReference) error {
	w := agentWebhookConfiguration(in.ns, caBundle, owner)
	return upsert(ctx, in.cs.AdmissionregistrationV1().MutatingWebhookConfigurations(), w, func(cur, want *admissionregistrationv1.MutatingWebhookConfiguration) {
		cur.Labels, cur.OwnerReferences, cur.Webhooks = want.Labels, want.OwnerReferences, want.Webhooks
	})
}

// agentWebhookConfiguration is the registration agentWebhook applies.
func agentWebhookConfiguration(ns string, caBundle []byte, owner []metav1.OwnerReference) *admissionregistrationv1.MutatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun // it copies the pull secret
	reinvoke := admissionregistrationv1.IfNeededReinvocationPolicy
	scope := admissionregistrationv1.NamespacedScope
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: agentClusterName(ns), Labels: agentLabels(), OwnerReferences: owner},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pods.agent.ferry.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: AgentName, Path: ptr(agentPath), Port: ptr(int32(443))},
				CABundle: caBundle,
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods", "pods/ephemeralcontainers"}, Scope: &scope,
				},
			}},
			ObjectSelector: &metav1.LabelSelector{}, // as the API server defaults it
			NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: []string{ns, AgentSystemNamespace}},
				{Key: AgentIgnoreLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{AgentIgnoreValue}},
			}},
			// Updates that change no image (labels, finalizers, …) do not
			// wait for the agent, nor fail when it is down.
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "creates-or-changes-images",
				Expression: agentMatchExpression,
			}},
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          ptr(int32(10)),
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &reinvoke,
		}},
	}
}

// agentMatchExpression (CEL) selects creations, the ephemeral containers
// subresource, and updates that change an image. An error evaluating it
// would refuse the request (failurePolicy Fail): absent fields are tested
// with has() first.
const agentMatchExpression = `request.operation == 'CREATE' ||
(has(request.subResource) && request.subResource == 'ephemeralcontainers') ||
object.spec.containers.map(c, c.image) != oldObject.spec.containers.map(c, c.image) ||
(has(object.spec.initContainers) ? object.spec.initContainers.map(c, c.image) : []) !=
  (has(oldObject.spec.initContainers) ? oldObject.spec.initContainers.map(c, c.image) : [])`

// checkAgent asks the API server, in a dry run, to create a Pod in the
// default namespace from the agent's image: when the agent answers, the Pod
// comes back with the pull secret added. A namespace the agent leaves
// alone, or a refusal by something else (a policy of that namespace), leaves
// it unchecked; an error calling the webhook until the time is up fails.
func (in *initRun) checkAgent(ctx context.Context) (string, error) {
	const ns = metav1.NamespaceDefault
	if ns == in.ns {
		return "not checked (ferry runs in " + ns + ")", nil
	}
	f, t := false, true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ferry-agent-check-", Labels: agentLabels()},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: &f,
			SecurityContext:              &corev1.PodSecurityContext{RunAsNonRoot: &t, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "check", Image: in.res.Agent,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	var last error
	start := time.Now()
	err := poll(ctx, 30*time.Second, func() (bool, error) {
		got, err := in.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		for _, s := range got.Spec.ImagePullSecrets {
			if s.Name == PullSecretName {
				return true, nil
			}
		}
		// Not called: the namespace is left alone, or the API server has
		// not seen the webhook yet.
		if n, err := in.cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil && n.Labels[AgentIgnoreLabel] == AgentIgnoreValue {
			return false, errIgnored
		}
		last = errors.New("the API server does not call the agent yet")
		return false, nil
	}, "the agent does not answer the API server")
	switch {
	case err == nil:
		return fmt.Sprintf("answering the API server (%.1fs)", time.Since(start).Seconds()), nil
	case errors.Is(err, errIgnored):
		return "not checked (namespace " + ns + " is ignored)", nil
	case last != nil && !strings.Contains(last.Error(), "webhook"):
		return "not checked (" + oneLine(last.Error()) + ")", nil
	}
	return "", fmt.Errorf("%w: %w", err, last)
}

var errIgnored = errors.New("ignored")

// waitRollout waits until Deployment name runs its current template, and
// only that, in every replica, Ready. A crashing pod fails at once.
func waitRollout(ctx context.Context, cs kubernetes.Interface, ns, name string, timeout time.Duration) error {
	var d *appsv1.Deployment
	err := poll(ctx, timeout, func() (bool, error) {
		var err error
		if d, err = cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		s, want := d.Status, *d.Spec.Replicas
		if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want {
			return true, nil
		}
		pods, err := deploymentPods(ctx, cs, d)
		if err != nil {
			return false, err
		}
		for _, p := range pods {
			if err := crashed(&p); err != nil {
				return false, fmt.Errorf("pod %s: %w%s", p.Name, err, events(ctx, cs, &p))
			}
		}
		return false, nil
	}, "Deployment "+name+" not rolled out")
	if errors.Is(err, errTimedOut) && d != nil {
		if pods, _ := deploymentPods(ctx, cs, d); len(pods) > 0 {
			p := &pods[len(pods)-1]
			err = fmt.Errorf("%w; pod %s: %s%s", err, p.Name, podState(p), events(ctx, cs, p))
		}
	}
	return err
}

// deploymentPods lists d's pods not being deleted, oldest first.
func deploymentPods(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) ([]corev1.Pod, error) {
	list, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(d.Spec.Selector.MatchLabels).String()})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	for i := 1; i < len(out); i++ { // few pods: insertion sort by creation
		for j := i; j > 0 && out[j].CreationTimestamp.Before(&out[j-1].CreationTimestamp); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

// objectClient is the part of a typed client upsert needs.
type objectClient[T any] interface {
	Get(context.Context, string, metav1.GetOptions) (T, error)
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// upsert creates want, or copies what init manages of it into the current
// object with merge and updates that, unless nothing changed.
func upsert[T interface {
	metav1.Object
	runtime.Object
}](ctx context.Context, c objectClient[T], want T, merge func(cur, want T)) error {
	cur, err := c.Get(ctx, want.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Create(ctx, want, metav1.CreateOptions{})
	} else if err == nil {
		before := cur.DeepCopyObject()
		merge(cur, want)
		if !apiequality.Semantic.DeepEqual(before, runtime.Object(cur)) {
			_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if apierrors.IsNotFound(err) { // deleted meanwhile (by the garbage collector, its owner gone)
			want.SetResourceVersion("")
			_, err = c.Create(ctx, want, metav1.CreateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("%T %s: %w", want, want.GetName(), err)
	}
	return nil
}
