package install

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/inject/loader"
	"github.com/ferrypkg/ferry/internal/cluster"
	"github.com/ferrypkg/ferry/internal/cluster/reach"
	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestEarlyPush: the early push puts the agent's image, with the account
// init made, into the registry at the Pod's address, where Install's own
// push then finds it (its tag names the same manifest); an address that
// does not answer ends it within about a second, and a push never started
// is not waited for.
func TestEarlyPush(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	addr := registrytest.Host(registrytest.NewServer(t, registry.Config{RootDir: t.TempDir(), HTPasswdFile: registrytest.Htpasswd(t, "bob", "pa55")}))
	bin, err := loader.ELF("amd64") // a small static executable
	if err != nil {
		t.Fatal(err)
	}
	ferry := filepath.Join(dir, "ferry")
	if err := os.WriteFile(ferry, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cluster.AuthSecretName, Namespace: "ferry"},
		Data:       cluster.Account{Username: "bob", Password: "pa55"}.Data(),
	})

	e := &earlyPush{done: make(chan struct{})}
	e.start(ctx, cs, "ferry", ferry, dir, addr, "amd64")
	e.start(ctx, cs, "ferry", ferry, dir, "127.0.0.1:1", "amd64") // only the first starts
	e.wait(ctx)
	e.none() // after the push: nothing
	repo, err := artifact.RemoteOptions{PlainHTTP: true, Credential: auth.StaticCredential(addr, auth.Credential{Username: "bob", Password: "pa55"}), Client: reach.RegistryClient()}.Repository(addr + "/" + Repository)
	if err != nil {
		t.Fatal(err)
	}
	got, err := repo.Resolve(ctx, "latest")
	if err != nil {
		t.Fatalf("the early push left no image: %v", err)
	}
	want, err := pushAgentImage(ctx, repo, ferry, "amd64")
	if err != nil || want.Digest != got.Digest {
		t.Fatalf("Install's push: %s, %v; the early push's: %s", want.Digest, err, got.Digest)
	}

	// An address that does not answer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close() // accepts nothing: connections wait
	e = &earlyPush{done: make(chan struct{})}
	start := time.Now()
	e.start(ctx, cs, "ferry", ferry, dir, ln.Addr().String(), "amd64")
	e.wait(ctx)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an early push to an address that does not answer took %s", took)
	}

	e = &earlyPush{done: make(chan struct{})}
	e.none()
	e.wait(ctx) // returns: none started
}
