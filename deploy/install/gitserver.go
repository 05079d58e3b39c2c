package install

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/kube"
)

// The in-cluster git server's objects, as Install makes them: `ferry
// git-server` from the agent's image serves the git repositories deployed
// packages carry, read-only over git's smart HTTP, behind the registry's
// account.
const (
	// GitName names the git server's Deployment and its ClusterIP Service.
	GitName = "ferry-git"
	// GitPort is its container port; the Service answers on port 80.
	GitPort = 8080
	// GitSecretName is an Opaque Secret (username, password) for Flux
	// GitRepository objects; GitCredsSecretName an Argo CD repo-creds
	// Secret for the same account. The agent copies them into the
	// namespaces of the sources it rewrites.
	GitSecretName      = "ferry-git-auth"
	GitCredsSecretName = "ferry-git-creds"
	// SourceRegistrySecretName is a dockerconfigjson Secret for the
	// registry at its Service address (cluster IP:port), which rewritten
	// Flux OCIRepository and HelmRepository objects name: source-controller
	// pulls from there, and looks its credentials up by that host, which
	// the Pods' pull secret (cluster.PullSecretName, for the nodes'
	// 127.0.0.1 NodePort) does not name.
	SourceRegistrySecretName = "ferry-registry-sources"
	// ArgoSecretTypeLabel marks Argo CD's repository credentials.
	ArgoSecretTypeLabel = "argocd.argoproj.io/secret-type"
	// GitCacheDir is where the git server indexes repositories (an emptyDir).
	GitCacheDir = "/var/cache/ferry-git"
)

func gitLabels() map[string]string {
	return map[string]string{cluster.LabelName: GitName, cluster.LabelManagedBy: cluster.ManagedBy, cluster.LabelComponent: "git"}
}

// gitServer runs the git server (its Service is gitService's), and writes
// the Secrets that rewritten GitOps sources name (the git server's and the
// registry's); it returns the server's base URL as Pods reach it
// (http://<cluster IP>) and how long it took to be Ready.
func (in *installer) gitServer(ctx context.Context, account cluster.Account) (string, time.Duration, error) {
	l := gitLabels()
	host, err := kube.ServiceHost(ctx, in.cs, in.ns, GitName)
	if err != nil {
		return "", 0, err
	}
	base := cluster.GitBaseURL(host)
	registry, err := kube.ServiceHost(ctx, in.cs, in.ns, cluster.RegistryName)
	if err != nil {
		return "", 0, err
	}
	registryAuth, err := dockerConfig(registry, account)
	if err != nil {
		return "", 0, err
	}
	secrets := in.cs.CoreV1().Secrets(in.ns)
	for _, s := range []*corev1.Secret{
		{
			ObjectMeta: metav1.ObjectMeta{Name: SourceRegistrySecretName, Namespace: in.ns, Labels: l},
			Type:       corev1.SecretTypeDockerConfigJson,
			Data:       map[string][]byte{corev1.DockerConfigJsonKey: registryAuth},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: GitSecretName, Namespace: in.ns, Labels: l},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{"username": []byte(account.Username), "password": []byte(account.Password)},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: GitCredsSecretName, Namespace: in.ns, Labels: withLabel(l, ArgoSecretTypeLabel, "repo-creds")},
			Type:       corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				"type": []byte("git"), "url": []byte(base + "/"),
				"username": []byte(account.Username), "password": []byte(account.Password),
			},
		},
	} {
		if err := kube.ApplySecret(ctx, secrets, s); err != nil {
			return "", 0, err
		}
	}
	if err := kube.ApplyDeployment(ctx, in.cs, in.gitDeployment()); err != nil {
		return "", 0, err
	}
	start := time.Now()
	if _, err := kube.DeletePodsOnDeadNodes(ctx, in.cs, in.ns, l); err != nil {
		return "", 0, err
	}
	stop := kube.Tend(ctx, in.cs, in.ns, l)
	err = kube.WaitRollout(ctx, in.cs, in.ns, GitName, in.opts.WaitTimeout)
	stop()
	if err != nil {
		return "", 0, fmt.Errorf("the git server: %w", err)
	}
	return base, time.Since(start), nil
}

// gitService is the git server's Service (prepare makes it: its address
// goes into the Secrets gitServer writes).
func (in *installer) gitService(ctx context.Context) error {
	return in.applyService(ctx, GitName, gitLabels(), "git", 80)
}

// gitDeployment runs the git server with the agent's ServiceAccount (it
// reads the deployed packages' records and the registry's Service) and the
// registry's htpasswd.
func (in *installer) gitDeployment() *appsv1.Deployment {
	l := gitLabels()
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: GitName, Namespace: in.ns, Labels: l},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: l},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l},
				Spec: in.podSpec(Name, corev1.Container{
					Name: "git",
					Args: []string{
						"git-server", "--addr=:" + strconv.Itoa(GitPort), "--namespace=" + in.ns,
						"--htpasswd=/auth/" + cluster.HtpasswdKey, "--cache-dir=" + GitCacheDir,
					},
					Ports: []corev1.ContainerPort{{Name: "git", ContainerPort: GitPort, Protocol: corev1.ProtocolTCP}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("git")}},
						PeriodSeconds: 1, // init waits for it
					},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
					}},
					VolumeMounts: []corev1.VolumeMount{
						{Name: "auth", MountPath: "/auth", ReadOnly: true},
						{Name: "cache", MountPath: GitCacheDir},
					},
				}, []corev1.Volume{
					{Name: "auth", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: cluster.AuthSecretName, Items: []corev1.KeyToPath{{Key: cluster.HtpasswdKey, Path: cluster.HtpasswdKey}},
						DefaultMode: ptr(int32(0o440)),
					}}},
					{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				}),
			},
		},
	}
}

// withLabel is l and k=v.
func withLabel(l map[string]string, k, v string) map[string]string {
	out := maps.Clone(l)
	out[k] = v
	return out
}

// dockerConfig is a .dockerconfigjson naming account for the registry at
// host.
func dockerConfig(host string, account cluster.Account) ([]byte, error) {
	return json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{
		"username": account.Username, "password": account.Password,
		"auth": base64.StdEncoding.EncodeToString([]byte(account.Username + ":" + account.Password)),
	}}})
}
