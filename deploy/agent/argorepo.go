package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ferrypkg/ferry/internal/cluster"
)

// HelmRepositoryPrefix starts the names of the Secrets HelmRepositories
// writes (then 16 hex digits of the SHA-256 of the URL).
const HelmRepositoryPrefix = "ferry-helm-"

// argoSecretType marks a Secret as Argo CD's repository configuration;
// "repository" is its value for one repository, matched by its exact URL.
const argoSecretType = "argocd.argoproj.io/secret-type"

// HelmRepositories makes the Argo CD repository Secrets that let Argo CD
// pull the charts of rewritten Application chart sources from the
// in-cluster registry: type helm, enableOCI, insecureOCIForceHttp (the
// registry answers plain HTTP), with the registry's account. Argo CD reads
// repository Secrets in its own namespace only: the Secret goes into the
// namespace of the Application, which is Argo CD's unless Applications in
// any namespace are enabled. Use Ensure as Webhook.EnsureHelmRepository.
//
// The agent needs, cluster-wide, create on Secrets; and get on the
// registry's Secrets in Namespace (cluster.ReadRegistry).
type HelmRepositories struct {
	Client kubernetes.Interface
	// Namespace is ferry's, where the registry's account is.
	Namespace string
}

// HelmRepositoryName is the name of the Secret HelmRepositories writes for
// url.
func HelmRepositoryName(url string) string {
	sum := sha256.Sum256([]byte(url))
	return HelmRepositoryPrefix + hex.EncodeToString(sum[:8])
}

// HelmRepositorySecret is the Argo CD repository Secret for url (an OCI
// Helm repository in the in-cluster registry, <host:port>/<path>) in
// namespace, with the registry's account.
func HelmRepositorySecret(namespace, url string, account cluster.Account) *corev1.Secret {
	name := HelmRepositoryName(url)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
			argoSecretType: "repository", cluster.LabelManagedBy: cluster.ManagedBy,
		}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			"name": []byte(name), "type": []byte("helm"), "url": []byte(url),
			"enableOCI": []byte("true"), "insecureOCIForceHttp": []byte("true"),
			"username": []byte(account.Username), "password": []byte(account.Password),
		},
	}
}

// Ensure makes the repository Secret for url exist in namespace. One that
// exists is left as it is: its name is derived from url and its content
// from the registry's account, which does not change while the registry
// lives (and the agent may create Secrets, not read every Secret).
func (h *HelmRepositories) Ensure(ctx context.Context, namespace, url string) error {
	secrets := h.Client.CoreV1().Secrets(namespace)
	_, account, err := cluster.ReadRegistry(ctx, h.Client.CoreV1().Secrets(h.Namespace))
	if err != nil {
		return err
	}
	_, err = secrets.Create(ctx, HelmRepositorySecret(namespace, url, account), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s/%s: %w", namespace, HelmRepositoryName(url), err)
	}
	return nil
}
