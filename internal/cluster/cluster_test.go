package cluster

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestStateKeys: the state Secret's keys outlive a ferry version (a newer
// ferry reads what an older init wrote), so they are pinned here.
func TestStateKeys(t *testing.T) {
	st := State{Registry: "127.0.0.1:31999", Image: "127.0.0.1:31999/ferry/registry@sha256:" + strings.Repeat("a", 64), Node: "node1", PullSecret: PullSecretName, AuthSecret: AuthSecretName,
		Storage: "s3://bucket/ferry?endpoint=https%3A%2F%2Fs3.example", Replicas: 2}
	data := st.Data()
	if got, want := keys(data), "authSecret,image,node,pullSecret,registry,replicas,storage"; got != want {
		t.Fatalf("keys %s, want %s", got, want)
	}
	if string(data["registry"]) != st.Registry {
		t.Fatalf("registry %q", data["registry"])
	}
	if back := StateFromData(data); back != st {
		t.Fatalf("round trip: %+v", back)
	}
	// What an init before S3 storage wrote: one replica on the filesystem.
	delete(data, "storage")
	delete(data, "replicas")
	if back := StateFromData(data); back.Storage != "" || back.Replicas != 1 {
		t.Fatalf("older state: %+v", back)
	}
}

// TestAccountKeys: likewise for the registry account, whose htpasswd key
// the registry's pod mounts.
func TestAccountKeys(t *testing.T) {
	a := Account{Username: "ferry", Password: "secret", Htpasswd: []byte("ferry:$2y$...\n")}
	data := a.Data()
	if got, want := keys(data), "htpasswd,password,username"; got != want {
		t.Fatalf("keys %s, want %s", got, want)
	}
	if _, ok := data[HtpasswdKey]; !ok {
		t.Fatalf("no %s", HtpasswdKey)
	}
	if back := AccountFromData(data); !reflect.DeepEqual(back, a) {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestReadRegistry(t *testing.T) {
	secrets := secretMap{
		StateName:      {Data: State{Registry: RegistryHost(DefaultNodePort)}.Data()},
		AuthSecretName: {Data: Account{Username: "ferry", Password: "pw"}.Data()},
	}
	st, a, err := ReadRegistry(context.Background(), secrets)
	if err != nil || st.Registry != "127.0.0.1:31999" || a.Username != "ferry" || a.Password != "pw" {
		t.Fatalf("%+v %+v %v", st, a, err)
	}
	delete(secrets, StateName)
	if _, _, err := ReadRegistry(context.Background(), secrets); !errors.Is(err, errNotFound) || !strings.Contains(err.Error(), "registry's state") {
		t.Fatalf("no state: %v", err)
	}
}

var errNotFound = errors.New("not found")

type secretMap map[string]*corev1.Secret

func (m secretMap) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Secret, error) {
	if s, ok := m[name]; ok {
		return s, nil
	}
	return nil, errNotFound
}

func keys(m map[string][]byte) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
