package inject

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/internal/cluster"
)

func s3Run(cs *fake.Clientset, replicas int32) *initRun {
	opts := InitOptions{Namespace: "ferry", StorageDir: DefaultStorageDir, Replicas: replicas,
		S3: &S3Storage{URL: "s3://bkt/ferry?endpoint=http%3A%2F%2F10.0.0.1%3A9000&path-style=true", CredentialsSecret: "s3-creds", CABundle: []byte("PEM")}}
	return &initRun{cs: cs, opts: opts, ns: "ferry", res: &InitResult{Registry: "127.0.0.1:31999", Image: "127.0.0.1:31999/ferry/registry@sha256:x", Node: "node1", Storage: opts.S3.URL}}
}

func creds(keys ...string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: "ferry"}, Data: map[string][]byte{}}
	for _, k := range keys {
		s.Data[k] = []byte("value")
	}
	return s
}

// On S3 the registry is N replicas without a node or a hostPath, spread
// over the nodes, with the storage and credentials only in its environment
// (the credentials by reference to the user's Secret), ready on /v2/, and
// replaced one at a time.
func TestS3Deployment(t *testing.T) {
	in := s3Run(fake.NewClientset(), 3)
	d := in.registryDeployment()
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]
	if *d.Spec.Replicas != 3 || spec.NodeName != "" || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("replicas %d, node %q, strategy %+v", *d.Spec.Replicas, spec.NodeName, d.Spec.Strategy)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("hostPath volume %s on S3", v.Name)
		}
	}
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != corev1.LabelHostname || spec.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.DoNotSchedule {
		t.Errorf("spread: %+v", spec.TopologySpreadConstraints)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if DeploymentStorage(d) != in.opts.S3.URL || env["AWS_CA_BUNDLE"].Value != cluster.CADir+"/"+cluster.CAKey {
		t.Errorf("env: %+v", c.Env)
	}
	for name, ref := range map[string][2]string{
		cluster.AccessKeyIDKey:     {"s3-creds", cluster.AccessKeyIDKey},
		cluster.SecretAccessKeyKey: {"s3-creds", cluster.SecretAccessKeyKey},
		cluster.HTTPSecretEnv:      {cluster.AuthSecretName, cluster.HTTPSecretKey},
	} {
		e := env[name]
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != ref[0] || e.ValueFrom.SecretKeyRef.Key != ref[1] {
			t.Errorf("%s: %+v, want a reference to %s/%s", name, e, ref[0], ref[1])
		}
	}
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != cluster.PullSecretName {
		t.Errorf("pull secrets: %v", spec.ImagePullSecrets)
	}
	if strings.Contains(strings.Join(c.Args, " "), "--root") {
		t.Errorf("args %v", c.Args)
	}
	if p := c.ReadinessProbe.Exec; p == nil || strings.Join(p.Command, " ") != cluster.RegistryBinaryPath+" probe --addr 127.0.0.1:5000" {
		t.Errorf("readiness: %+v", c.ReadinessProbe)
	}

	// The filesystem registry is unchanged: one Pod on its node's hostPath.
	fs := &initRun{opts: InitOptions{StorageDir: DefaultStorageDir, Replicas: 1}, ns: "ferry", res: &InitResult{Node: "node1"}}
	d = fs.registryDeployment()
	if *d.Spec.Replicas != 1 || d.Spec.Template.Spec.NodeName != "node1" || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || DeploymentStorage(d) != "" || d.Spec.Template.Spec.Volumes[0].HostPath == nil {
		t.Errorf("filesystem deployment changed: %+v", d.Spec)
	}
}

// The storage step refuses what it can not do before anything changes.
func TestInitStorageChecks(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		objects []runtimeObject
		run     func(cs *fake.Clientset) *initRun
		want    string
	}{
		"no secret":    {nil, func(cs *fake.Clientset) *initRun { return s3Run(cs, 2) }, "Secret s3-creds not found in namespace ferry"},
		"missing key":  {[]runtimeObject{creds(cluster.AccessKeyIDKey)}, func(cs *fake.Clientset) *initRun { return s3Run(cs, 2) }, "has no " + cluster.SecretAccessKeyKey},
		"fs replicas":  {nil, func(cs *fake.Clientset) *initRun { in := s3Run(cs, 2); in.opts.S3 = nil; return in }, "filesystem storage runs 1 replica"},
		"zero":         {nil, func(cs *fake.Clientset) *initRun { return s3Run(cs, 0) }, "want at least 1"},
		"ok":           {[]runtimeObject{creds(cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey)}, func(cs *fake.Clientset) *initRun { return s3Run(cs, 2) }, ""},
		"switch empty": {[]runtimeObject{creds(cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey), fsDeployment()}, func(cs *fake.Clientset) *initRun { return s3Run(cs, 2) }, ""},
		"switch strands": {[]runtimeObject{creds(cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey), fsDeployment(), packageRecord()},
			func(cs *fake.Clientset) *initRun { return s3Run(cs, 2) }, "would strand them"},
		"switch with migrate": {[]runtimeObject{creds(cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey), fsDeployment(), packageRecord()},
			func(cs *fake.Clientset) *initRun { in := s3Run(cs, 2); in.opts.Migrate = true; return in }, ""},
		"migrate back": {[]runtimeObject{creds(cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey), packageRecord()},
			func(cs *fake.Clientset) *initRun {
				in := s3Run(cs, 2)
				if _, err := cs.AppsV1().Deployments("ferry").Create(ctx, in.registryDeployment(), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				in.opts.S3, in.opts.Replicas, in.opts.Migrate = nil, 1, true
				return in
			}, "only from the filesystem to S3"},
		"same storage, more replicas": {[]runtimeObject{creds(cluster.AccessKeyIDKey, cluster.SecretAccessKeyKey), packageRecord()},
			func(cs *fake.Clientset) *initRun {
				in := s3Run(cs, 2)
				d := in.registryDeployment()
				if _, err := cs.AppsV1().Deployments("ferry").Create(ctx, d, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				in.opts.Replicas = 3
				return in
			}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objects...)
			_, err := tc.run(cs).storage(ctx)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// With several replicas on S3 a PodDisruptionBudget keeps all but one up
// through a drain; back on one replica, or on the filesystem, it goes.
func TestStorageObjects(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	in := s3Run(cs, 2)
	if err := in.storageObjects(ctx); err != nil {
		t.Fatal(err)
	}
	pdb, err := cs.PolicyV1().PodDisruptionBudgets("ferry").Get(ctx, cluster.RegistryName, metav1.GetOptions{})
	if err != nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatalf("PDB: %+v %v", pdb, err)
	}
	if cm, err := cs.CoreV1().ConfigMaps("ferry").Get(ctx, cluster.CAName, metav1.GetOptions{}); err != nil || cm.Data[cluster.CAKey] != "PEM" {
		t.Fatalf("CA ConfigMap: %v", err)
	}
	in.opts.S3 = nil
	in.opts.Replicas = 1
	if err := in.storageObjects(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("ferry").Get(ctx, cluster.RegistryName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("PDB after going back to the filesystem: %v", err)
	}
}

type runtimeObject = runtime.Object

// fsDeployment is a filesystem registry's Deployment, as init made it.
func fsDeployment() *appsv1.Deployment {
	in := &initRun{opts: InitOptions{StorageDir: DefaultStorageDir, Replicas: 1}, ns: "ferry", res: &InitResult{Node: "node1"}}
	return in.registryDeployment()
}

// packageRecord is the record of a deployed package (deploy's Secret).
func packageRecord() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ferry-package-app", Namespace: "ferry", Labels: map[string]string{cluster.LabelPackage: "app"}}}
}
