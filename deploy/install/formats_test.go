package install

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// old53 is where the objects ferry 53a21d7 wrote are (see its README).
const old53 = "testdata/formats-53a21d7"

// changedFormat is what a failing pin says: a format changed.
const changedFormat = "a stored format changed since 53a21d7: give init a migration (formatMigrations), bump cluster.FormatGeneration and say so in docs/operations.md"

func load53[T any](t *testing.T, name string) *T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(old53, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var obj T
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return &obj
}

// TestFormatState: the state Secret as 53a21d7's init wrote it is read
// whole, and this ferry writes the same data for the same state.
func TestFormatState(t *testing.T) {
	sec := load53[corev1.Secret](t, "secret-ferry-state")
	st := cluster.StateFromData(sec.Data)
	want := cluster.State{Registry: "127.0.0.1:31999", Image: "127.0.0.1:31999/ferry/registry@sha256:4f1c6b8e2a3d5f7a9b0c1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6f708",
		Node: "node1", PullSecret: cluster.PullSecretName, AuthSecret: cluster.AuthSecretName, Replicas: 1}
	if st != want {
		t.Errorf("read %+v, want %+v", st, want)
	}
	if got := st.Data(); !maps.EqualFunc(got, sec.Data, bytes.Equal) {
		t.Errorf("%s: wrote %q, 53a21d7 wrote %q", changedFormat, got, sec.Data)
	}
	if sec.Name != cluster.StateName || sec.Labels[cluster.LabelManagedBy] != cluster.ManagedBy {
		t.Errorf("%s: %s %v", changedFormat, sec.Name, sec.Labels)
	}
}

// TestFormatAccount: the registry's account and pull secret as 53a21d7
// made them are read as they are (init keeps the account it finds).
func TestFormatAccount(t *testing.T) {
	sec := load53[corev1.Secret](t, "secret-ferry-registry-auth")
	a := cluster.AccountFromData(sec.Data)
	if a.Username != "ferry" || len(a.Password) != 32 || !bytes.HasPrefix(a.Htpasswd, []byte("ferry:$2a$04$")) || len(sec.Data[cluster.HTTPSecretKey]) != 64 {
		t.Errorf("read %+v", a)
	}
	back := a.Data()
	back[cluster.HTTPSecretKey] = sec.Data[cluster.HTTPSecretKey]
	if !maps.EqualFunc(back, sec.Data, bytes.Equal) {
		t.Errorf("%s: account keys %v, 53a21d7's %v", changedFormat, slicesOfKeys(back), slicesOfKeys(sec.Data))
	}
	pull := load53[corev1.Secret](t, "secret-ferry-registry-pull")
	var cfg struct {
		Auths map[string]struct{ Username, Password, Auth string } `json:"auths"`
	}
	if err := json.Unmarshal(pull.Data[corev1.DockerConfigJsonKey], &cfg); err != nil || pull.Type != corev1.SecretTypeDockerConfigJson || pull.Name != cluster.PullSecretName {
		t.Fatalf("%s: pull secret %s of type %s: %v", changedFormat, pull.Name, pull.Type, err)
	}
	got := cfg.Auths["127.0.0.1:31999"]
	if got.Username != a.Username || got.Password != a.Password || got.Auth != base64.StdEncoding.EncodeToString([]byte(a.Username+":"+a.Password)) {
		t.Errorf("pull secret %+v", cfg)
	}
	mine, err := dockerConfig("127.0.0.1:31999", a)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, pull.Data[corev1.DockerConfigJsonKey]) {
		t.Errorf("%s: dockerconfigjson %s, 53a21d7's %s", changedFormat, mine, pull.Data[corev1.DockerConfigJsonKey])
	}
}

func slicesOfKeys[V any](m map[string]V) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

// TestFormatRecords: the records of deployed packages as 53a21d7 saved
// them are read by this ferry (the agent's images, the repositories), and
// saved again byte for byte: the fields added since (a component's
// advisories) are left out when empty.
func TestFormatRecords(t *testing.T) {
	ctx := context.Background()
	app := load53[corev1.Secret](t, "secret-ferry-package-app")
	charted := load53[corev1.Secret](t, "secret-ferry-package-charted")
	charted.Namespace = "ferry"
	cs := fake.NewClientset(app, charted)
	st := &rollout.State{Client: cs, Namespace: "ferry"}
	recs, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Name != "app" || recs[1].Name != "charted" {
		t.Fatalf("records %v", recs)
	}
	if r := recs[1]; len(r.Releases) != 1 || r.Releases[0].Name != "pi" || r.Config.Components[0].Charts[0].ReleaseName != "pi" || r.Config.Components[0].Images[0].SBOMs[0].Size != 99 {
		t.Errorf("charted read as %+v %+v", r, r.Config.Components[0])
	}
	images, err := st.Images(ctx)
	if err != nil || len(images) == 0 {
		t.Fatalf("the agent's images from 53a21d7's records: %v, %v", images, err)
	}
	repos, err := st.Repositories(ctx)
	if err != nil || len(repos) == 0 {
		t.Fatalf("the agent's repositories from 53a21d7's records: %v, %v", repos, err)
	}
	again := fake.NewClientset()
	for _, r := range recs {
		if err := (&rollout.State{Client: again, Namespace: "ferry"}).Save(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, old := range []*corev1.Secret{app, charted} {
		mine, err := again.CoreV1().Secrets("ferry").Get(ctx, old.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(mine.Data, old.Data, bytes.Equal) || !maps.Equal(mine.Labels, old.Labels) {
			t.Errorf("%s: record %s\nnow   %s\n%s\n53a21d7 %s\n%s", changedFormat, old.Name, mine.Data["record.json"], mine.Data["ferry.json"], old.Data["record.json"], old.Data["ferry.json"])
		}
	}
}

func packageClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return crfake.NewClientBuilder().WithScheme(scheme).Build()
}

// TestFormatKeysAndPackages: a trusted key's Secret is named and made as
// 53a21d7 made it (init finds the one there), and the Package init gives
// a package 53a21d7 deployed without one is the Package 53a21d7's init
// gave it; Packages as 53a21d7 wrote them are read by this ferry.
func TestFormatKeysAndPackages(t *testing.T) {
	ctx := context.Background()
	key := load53[corev1.Secret](t, "secret-ferry-key")
	cs := fake.NewClientset(load53[corev1.Secret](t, "secret-ferry-package-app"))
	ref, err := deploy.EnsureKeySecret(ctx, cs, "ferry", key.Data[deploy.KeyFile])
	if err != nil {
		t.Fatal(err)
	}
	mine, err := cs.CoreV1().Secrets("ferry").Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: key Secret named %s now, %s by 53a21d7: %v", changedFormat, ref.Name, key.Name, err)
	}
	if !maps.Equal(mine.Labels, key.Labels) || !reflect.DeepEqual(mine.Immutable, key.Immutable) || !maps.EqualFunc(mine.Data, key.Data, bytes.Equal) {
		t.Errorf("%s: key Secret %+v, 53a21d7's %+v", changedFormat, mine, key)
	}

	c := packageClient(t)
	if _, err := deploy.Migrate(ctx, cs, c, nil, "ferry", []v1alpha1.KeyReference{ref}); err != nil {
		t.Fatal(err)
	}
	var migrated v1alpha1.Package
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ferry", Name: "app"}, &migrated); err != nil {
		t.Fatal(err)
	}
	old := load53[v1alpha1.Package](t, "package-app-migrated")
	if !reflect.DeepEqual(migrated.Spec, old.Spec) || !maps.Equal(migrated.Annotations, old.Annotations) {
		t.Errorf("%s: migrated Package %+v %v, 53a21d7's %+v %v", changedFormat, migrated.Spec, migrated.Annotations, old.Spec, old.Annotations)
	}

	applied := load53[v1alpha1.Package](t, "package-other-applied")
	mineApplied, _, err := deploy.ApplyPackage(ctx, c, "ferry", "other", applied.Spec, applied.Labels)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mineApplied.Spec, applied.Spec) || !maps.Equal(mineApplied.Labels, applied.Labels) ||
		len(mineApplied.Annotations) != len(applied.Annotations) || mineApplied.Annotations[v1alpha1.RequestAnnotation] == "" || applied.Annotations[v1alpha1.RequestAnnotation] == "" {
		t.Errorf("%s: applied Package %+v, 53a21d7's %+v", changedFormat, mineApplied.ObjectMeta, applied.ObjectMeta)
	}
	// The Package 53a21d7 wrote reads back as this ferry's type, every
	// field known (a JSON round trip gives the same bytes).
	raw, err := os.ReadFile(filepath.Join(old53, "package-other-applied.json"))
	if err != nil {
		t.Fatal(err)
	}
	back, err := json.MarshalIndent(applied, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(back, '\n'), raw) {
		t.Errorf("%s: Package read and written again:\n%s\nwas\n%s", changedFormat, back, raw)
	}
}

// TestFormatCRDs: the CRDs this ferry applies are the ones 53a21d7 applied
// (Package and the fleet's): same versions, same schemas.
func TestFormatCRDs(t *testing.T) {
	crd, err := v1alpha1.CRD()
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := fleetv1.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append([]*apiextensionsv1.CustomResourceDefinition{crd}, fleet...) {
		old := load53[apiextensionsv1.CustomResourceDefinition](t, "crd-"+c.Name)
		if !reflect.DeepEqual(c.Spec, old.Spec) {
			mine, _ := json.Marshal(c.Spec)
			was, _ := json.Marshal(old.Spec)
			t.Errorf("%s: CRD %s\nnow %s\nwas %s", changedFormat, c.Name, mine, was)
		}
	}
}

// TestFormatAgentCertificates: init keeps the agent's certificates and CA
// ConfigMap as 53a21d7 made them while they are good (no webhook outage
// for a new CA on upgrade).
func TestFormatAgentCertificates(t *testing.T) {
	ctx := context.Background()
	tlsSec := load53[corev1.Secret](t, "secret-ferry-agent-tls")
	caCM := load53[corev1.ConfigMap](t, "configmap-ferry-agent-ca")
	cs := fake.NewClientset(tlsSec.DeepCopy(), caCM.DeepCopy())
	in := &installer{cs: cs, ns: "ferry"}
	got, err := in.objects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Replaced != "" || !bytes.Equal(got.Cert, tlsSec.Data[corev1.TLSCertKey]) {
		t.Errorf("%s: the agent's certificates from 53a21d7 were replaced (%s)", changedFormat, got.Replaced)
	}
	sec, err := cs.CoreV1().Secrets("ferry").Get(ctx, TLSSecretName, metav1.GetOptions{})
	if err != nil || sec.Type != tlsSec.Type || !maps.EqualFunc(sec.Data, tlsSec.Data, bytes.Equal) {
		t.Errorf("%s: TLS Secret now %v, %v", changedFormat, sec, err)
	}
	cm, err := cs.CoreV1().ConfigMaps("ferry").Get(ctx, CAConfigMap, metav1.GetOptions{})
	if err != nil || !maps.Equal(cm.Data, caCM.Data) || !maps.Equal(cm.Labels, caCM.Labels) {
		t.Errorf("%s: CA ConfigMap now %v, %v", changedFormat, cm, err)
	}
}

// TestInitRecordsFormats: what init reads and writes of the ferry-version
// ConfigMap on a new cluster, on one 53a21d7 set up (no record), on one
// this ferry set up, and on one a newer ferry set up.
func TestInitRecordsFormats(t *testing.T) {
	ctx := context.Background()
	running := cluster.Ferry{Version: "v1.0.0", Commit: "0123456789abcdef0123", Generation: cluster.FormatGeneration}
	newer := cluster.Ferry{Version: "v9.0.0", Commit: "fedcba", Generation: cluster.FormatGeneration + 1}
	recorded := func(s cluster.Setup) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cluster.VersionName, Namespace: "ferry"}, Data: s.Data()}
	}
	for _, tc := range []struct {
		name      string
		objects   []runtime.Object
		allow     bool
		wantErr   error
		wantSetUp cluster.Ferry
	}{
		{name: "new cluster", wantSetUp: running},
		{name: "set up by 53a21d7", objects: []runtime.Object{load53[corev1.Secret](t, "secret-ferry-state")}, wantSetUp: cluster.Ferry{}},
		{name: "set up by this ferry", objects: []runtime.Object{recorded(cluster.Setup{SetUpBy: running, LastInit: running})}, wantSetUp: running},
		{name: "set up by a newer ferry", objects: []runtime.Object{recorded(cluster.Setup{SetUpBy: newer, LastInit: newer})}, wantErr: cluster.ErrDowngrade},
		{name: "init by a newer ferry", objects: []runtime.Object{recorded(cluster.Setup{SetUpBy: running, LastInit: newer})}, wantErr: cluster.ErrDowngrade},
		{name: "downgrade allowed", objects: []runtime.Object{recorded(cluster.Setup{SetUpBy: newer, LastInit: newer})}, allow: true, wantSetUp: newer},
		{name: "unreadable record", objects: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cluster.VersionName, Namespace: "ferry"}, Data: map[string]string{"generation": "two"}}}, wantErr: errors.New("generation")},
		// Garbled by someone who may write the namespace: --allow-downgrade
		// gets past it too (it may be a newer ferry's), and init records
		// itself over it, who set the cluster up unknown.
		{name: "unreadable record, downgrade allowed", objects: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cluster.VersionName, Namespace: "ferry"}, Data: map[string]string{"generation": "99999999999999999999", "setUpVersion": "v1"}}}, allow: true, wantSetUp: cluster.Ferry{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset(tc.objects...)
			in := &Init{Client: cs, Version: cluster.Ferry{Version: running.Version, Commit: running.Commit}, AllowDowngrade: tc.allow}
			found, err := in.readFormats(ctx, "ferry")
			if tc.wantErr != nil {
				var de *cluster.DowngradeError
				if err == nil || (errors.Is(tc.wantErr, cluster.ErrDowngrade) && !errors.As(err, &de)) {
					t.Fatalf("readFormats = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := in.migrateFormats(ctx, "ferry", found); err != nil {
				t.Fatal(err)
			}
			s, err := in.recordFormats(ctx, "ferry", found)
			if err != nil {
				t.Fatal(err)
			}
			cm, err := cs.CoreV1().ConfigMaps("ferry").Get(ctx, cluster.VersionName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			back, err := cluster.SetupFromData(cm.Data)
			if err != nil || back != s || s.LastInit != running || s.SetUpBy != tc.wantSetUp {
				t.Errorf("recorded %+v (%v), returned %+v; want set up by %+v, last init %+v", back, err, s, tc.wantSetUp, running)
			}
			if cm.Labels[cluster.LabelManagedBy] != cluster.ManagedBy {
				t.Errorf("labels %v", cm.Labels)
			}
			// init again: the same record, still readable.
			if found, err = in.readFormats(ctx, "ferry"); err != nil && !tc.allow {
				t.Fatal(err)
			}
			if again, err := in.recordFormats(ctx, "ferry", found); err != nil || again != s {
				t.Errorf("init again recorded %+v, %v; first %+v", again, err, s)
			}
		})
	}
}

// TestEveryGenerationHasAMigration: a new generation changes a format, so
// it comes with the migration that brings an older cluster to it.
func TestEveryGenerationHasAMigration(t *testing.T) {
	for g := 2; g <= cluster.FormatGeneration; g++ {
		if formatMigrations[g] == nil {
			t.Errorf("format generation %d has no migration in formatMigrations", g)
		}
	}
	for g := range formatMigrations {
		if g < 2 || g > cluster.FormatGeneration {
			t.Errorf("formatMigrations[%d]: generations run from 2 to cluster.FormatGeneration (%d)", g, cluster.FormatGeneration)
		}
	}
}

// TestFormatRegistryLayout: the registry's storage holds a pushed image
// where 53a21d7's did (distribution's layout: repositories' links, blobs
// by digest), so a registry of this ferry serves the storage an older one
// wrote, and the other way round.
func TestFormatRegistryLayout(t *testing.T) {
	got := registryLayout(t)
	want, err := os.ReadFile(filepath.Join(old53, "registry-layout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s: the registry's storage\nnow:\n%s\n53a21d7:\n%s", changedFormat, got, want)
	}
}
