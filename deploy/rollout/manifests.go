package rollout

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/artifact"
)

// FieldManager is the field manager of what deploy applies.
const FieldManager = "ferry"

// Object is a Kubernetes object deploy applied from a package's manifests.
type Object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// applier applies manifests with server-side apply, as field manager ferry.
type applier struct {
	getter  genericclioptions.RESTClientGetter
	dyn     dynamic.Interface
	mapper  meta.RESTMapper
	ensure  func(ctx context.Context, ns string) error // namespace and pull secret
	render  *imageRenderer
	timeout time.Duration
}

func newApplier(getter genericclioptions.RESTClientGetter, render *imageRenderer, ensure func(context.Context, string) error, timeout time.Duration) (*applier, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := getter.ToRESTMapper()
	if err != nil {
		return nil, err
	}
	return &applier{getter: getter, dyn: dyn, mapper: mapper, ensure: ensure, render: render, timeout: timeout}, nil
}

// fetchManifests reads a manifest bundle from the package's repository in
// the in-cluster registry, checked against its digest.
func fetchManifests(ctx context.Context, repo *remote.Repository, m artifact.Manifest) ([]byte, error) {
	data, err := content.FetchAll(ctx, repo.Blobs(), ocispec.Descriptor{MediaType: artifact.MediaTypeManifestBundle, Digest: m.Digest, Size: m.Size})
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", m.Name, err)
	}
	return data, nil
}

// apply rewrites the images of a bundle, applies every object (namespaces
// and CRDs first), waits until they are ready, and returns what it applied.
func (a *applier) apply(ctx context.Context, m artifact.Manifest, data []byte) ([]Object, error) {
	rendered, err := a.render.Run(bytes.NewBuffer(data))
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", m.Name, err)
	}
	docs, err := splitYAML(rendered.Bytes())
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", m.Name, err)
	}
	objs := make([]*unstructured.Unstructured, 0, len(docs))
	for i, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("manifests %s: document %d: %w", m.Name, i+1, err)
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("manifests %s: document %d: needs apiVersion, kind and metadata.name", m.Name, i+1)
		}
		objs = append(objs, u)
	}
	sort.SliceStable(objs, func(i, j int) bool { return applyOrder(objs[i]) < applyOrder(objs[j]) })
	var applied []Object
	var ready bytes.Buffer
	for _, u := range objs {
		o, err := a.applyObject(ctx, u, m.Namespace)
		if err != nil {
			return applied, fmt.Errorf("manifests %s: %w", m.Name, err)
		}
		applied = append(applied, o)
		b, _ := yaml.Marshal(u.Object)
		ready.WriteString("---\n")
		ready.Write(b)
	}
	if err := a.wait(ready.Bytes()); err != nil {
		return applied, fmt.Errorf("manifests %s: %w", m.Name, err)
	}
	return applied, nil
}

func applyOrder(u *unstructured.Unstructured) int {
	switch u.GetKind() {
	case "Namespace":
		return 0
	case "CustomResourceDefinition":
		return 1
	}
	return 2
}

func (a *applier) applyObject(ctx context.Context, u *unstructured.Unstructured, defaultNS string) (Object, error) {
	gvk := u.GroupVersionKind()
	mapping, err := a.mapping(gvk)
	if err != nil {
		return Object{}, fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	o := Object{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName()}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		o.Namespace = u.GetNamespace()
		if o.Namespace == "" {
			o.Namespace = defaultNS
		}
		if o.Namespace == "" {
			o.Namespace = metav1.NamespaceDefault
		}
		u.SetNamespace(o.Namespace)
		if err := a.ensure(ctx, o.Namespace); err != nil {
			return o, err
		}
		ri = a.dyn.Resource(mapping.Resource).Namespace(o.Namespace)
	}
	if _, err := ri.Apply(ctx, o.Name, u, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return o, fmt.Errorf("apply %s: %w", o, err)
	}
	return o, nil
}

// mapping finds the resource of a kind, looking again after a CRD the same
// bundle applied.
func (a *applier) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && meta.IsNoMatchError(err) {
		meta.MaybeResetRESTMapper(a.mapper)
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	return m, err
}

// wait waits until what was applied is ready, as Helm's --wait judges it.
func (a *applier) wait(manifests []byte) error {
	cfg, err := helmConfig(a.getter, metav1.NamespaceDefault)
	if err != nil {
		return err
	}
	res, err := cfg.KubeClient.Build(bytes.NewReader(manifests), false)
	if err != nil {
		return err
	}
	return cfg.KubeClient.Wait(res, a.timeout)
}

// deleteObject deletes an object deploy applied earlier; one already gone
// is fine.
func (a *applier) deleteObject(ctx context.Context, o Object) error {
	gv, err := schema.ParseGroupVersion(o.APIVersion)
	if err != nil {
		return fmt.Errorf("delete %s: %w", o, err)
	}
	mapping, err := a.mapping(gv.WithKind(o.Kind))
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil // its kind is gone (a CRD removed before)
		}
		return fmt.Errorf("delete %s: %w", o, err)
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if o.Namespace != "" {
		ri = a.dyn.Resource(mapping.Resource).Namespace(o.Namespace)
	}
	bg := metav1.DeletePropagationBackground
	if err := ri.Delete(ctx, o.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s: %w", o, err)
	}
	return nil
}
