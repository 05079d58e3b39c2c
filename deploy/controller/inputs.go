package controller

// What a Package asks for besides its root: its keys and values, and
// whether everything it was installed with is unchanged.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
)

// unchanged tells whether a Package needs nothing: its root and
// everything it was installed with are those last installed, it is
// installed and ready, and its resources were checked for drift (a full
// install, which changes nothing that matches) less than the drift
// interval ago.
func (r *Reconciler) unchanged(pkg *v1alpha1.Package, root, installedFor string) bool {
	st := &pkg.Status
	return st.Digest == root && st.InstalledFor == installedFor && st.InstalledAt != nil &&
		r.now().Sub(st.InstalledAt.Time) < r.driftCheck() &&
		meta.IsStatusConditionTrue(st.Conditions, v1alpha1.Installed) &&
		meta.IsStatusConditionTrue(st.Conditions, v1alpha1.Ready)
}

// installedFor identifies what an install is given: the verified root and
// keys, where the registry is, the components, the values and the timeout.
func installedFor(verifiedFor, registry string, components []string, values map[string]any, charts map[string]map[string]any, timeout time.Duration) (string, error) {
	data, err := json.Marshal(struct {
		VerifiedFor, Registry string
		Components            []string
		Values                map[string]any
		Charts                map[string]map[string]any
		Timeout               time.Duration
	}{verifiedFor, registry, components, values, charts, timeout})
	if err != nil {
		return "", fmt.Errorf("values: %w", err)
	}
	return digest.FromBytes(data).String(), nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) driftCheck() time.Duration {
	if r.DriftCheck > 0 {
		return r.DriftCheck
	}
	return DefaultDriftCheck
}

// keys loads the public keys the Package names; fingerprint identifies
// them (and the insecure switch).
func (r *Reconciler) keys(ctx context.Context, pkg *v1alpha1.Package) ([]artifact.Verifier, string, error) {
	if pkg.Spec.InsecureSkipSignatureVerification {
		return nil, "insecure", nil
	}
	if len(pkg.Spec.Keys) == 0 {
		return nil, "", errors.New("spec.keys is empty: name the public keys the package must be signed with")
	}
	var (
		keys []artifact.Verifier
		sum  = sha256.New()
	)
	for _, ref := range pkg.Spec.Keys {
		name := keyName(ref, "cosign.pub")
		data, err := r.refData(ctx, pkg.Namespace, ref, "cosign.pub")
		if err != nil {
			return nil, "", fmt.Errorf("key %s: %w", name, err)
		}
		k, err := artifact.ParsePublicKey(name, data)
		if err != nil {
			return nil, "", err
		}
		keys = append(keys, k)
		sum.Write(data)
	}
	return keys, hex.EncodeToString(sum.Sum(nil)), nil
}

// values are the spec's values for every chart, and per chart (its
// valuesFrom merged in order, its values over them).
func (r *Reconciler) values(ctx context.Context, pkg *v1alpha1.Package) (map[string]any, map[string]map[string]any, error) {
	all := map[string]any{}
	if v := pkg.Spec.Values; v != nil && len(v.Raw) > 0 {
		if err := json.Unmarshal(v.Raw, &all); err != nil {
			return nil, nil, fmt.Errorf("spec.values: %w", err)
		}
	}
	charts := map[string]map[string]any{}
	for _, c := range pkg.Spec.Charts {
		vals := map[string]any{}
		for _, ref := range c.ValuesFrom {
			data, err := r.refData(ctx, pkg.Namespace, ref, "values.yaml")
			if err != nil {
				return nil, nil, fmt.Errorf("chart %s: values from %s: %w", c.Name, keyName(ref, "values.yaml"), err)
			}
			var m map[string]any
			if err := yaml.Unmarshal(data, &m); err != nil {
				return nil, nil, fmt.Errorf("chart %s: values from %s: %w", c.Name, keyName(ref, "values.yaml"), err)
			}
			vals = mergeValues(vals, m)
		}
		if c.Values != nil && len(c.Values.Raw) > 0 {
			var m map[string]any
			if err := json.Unmarshal(c.Values.Raw, &m); err != nil {
				return nil, nil, fmt.Errorf("chart %s: values: %w", c.Name, err)
			}
			vals = mergeValues(vals, m)
		}
		charts[c.Name] = vals
	}
	return all, charts, nil
}

// mergeValues merges src over dst, tables deeply, as Helm merges values
// files.
func mergeValues(dst, src map[string]any) map[string]any {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeValues(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// refData reads the key of a Secret or ConfigMap.
func (r *Reconciler) refData(ctx context.Context, ns string, ref v1alpha1.KeyReference, def string) ([]byte, error) {
	key := ref.Key
	if key == "" {
		key = def
	}
	if ref.Kind == "ConfigMap" {
		var cm corev1.ConfigMap
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, &cm); err != nil {
			return nil, err
		}
		if v, ok := cm.Data[key]; ok {
			return []byte(v), nil
		}
		if v, ok := cm.BinaryData[key]; ok {
			return v, nil
		}
		return nil, fmt.Errorf("ConfigMap %s has no key %s", ref.Name, key)
	}
	var sec corev1.Secret
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, &sec); err != nil {
		return nil, err
	}
	v, ok := sec.Data[key]
	if !ok {
		return nil, fmt.Errorf("Secret %s has no key %s", ref.Name, key)
	}
	return v, nil
}

func keyName(ref v1alpha1.KeyReference, def string) string {
	kind, key := ref.Kind, ref.Key
	if kind == "" {
		kind = "Secret"
	}
	if key == "" {
		key = def
	}
	return kind + "/" + ref.Name + "/" + key
}
