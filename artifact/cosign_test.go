package artifact_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/internal/testsupport/peertool"
)

// cosignCLI runs the real cosign binary offline: no transparency log, a
// private HOME, the key password in COSIGN_PASSWORD.
type cosignCLI struct {
	t    *testing.T
	bin  string
	home string
	// env is added to the environment last (it wins), e.g. COSIGN_EXPERIMENTAL=1.
	env []string
}

func newCosign(t *testing.T) *cosignCLI {
	return &cosignCLI{t: t, bin: peertool.Require(t, "cosign"), home: t.TempDir()}
}

func (c *cosignCLI) run(password string, args ...string) (string, error) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Dir = c.home
	cmd.Env = append(os.Environ(), "HOME="+c.home, "COSIGN_PASSWORD="+password, "DOCKER_CONFIG="+filepath.Join(c.home, ".docker"),
		"TUF_ROOT="+filepath.Join(c.home, ".sigstore"), "COSIGN_EXPERIMENTAL=0")
	cmd.Env = append(cmd.Env, c.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (c *cosignCLI) must(password string, args ...string) string {
	c.t.Helper()
	out, err := c.run(password, args...)
	if err != nil {
		c.t.Fatalf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (c *cosignCLI) verify(pub, ref string) (string, error) {
	return c.run("", "verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-http-registry", ref)
}

// TestCosignInterop proves both directions with the real cosign CLI:
// packages signed by ferry pass `cosign verify`, packages signed by
// `cosign sign` pass ferry's verify (in the registry and after pull), and
// keys made by either tool work in both.
func TestCosignInterop(t *testing.T) {
	ctx := context.Background()
	cosign := newCosign(t)
	w := newWorld(t)
	keys := t.TempDir()

	// A key pair from the cosign CLI, one from ferry.
	cosign.must("cli-pw", "generate-key-pair", "--output-key-prefix", filepath.Join(keys, "cli"))
	cliKey, err := key.LoadPrivate(filepath.Join(keys, "cli.key"), []byte("cli-pw"))
	if err != nil {
		t.Fatalf("ferry loads a cosign-made private key: %v", err)
	}
	cliPub, err := artifact.LoadPublicKey(filepath.Join(keys, "cli.pub"))
	if err != nil {
		t.Fatal(err)
	}
	ferryKey, ferryPub := keyPair(t, keys, "ferry") // password pw-ferry

	// ferry signs with both keys, pushes; cosign verifies with each public key.
	path := filepath.Join(t.TempDir(), "demo.tar.zst")
	res := create(t, w, path)
	for _, k := range []*key.Private{ferryKey, cliKey} {
		if _, err := artifact.Sign(ctx, openPkg(t, path), "", k, artifact.SignOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	byFerry := w.Host + "/by-ferry/demo"
	if _, err := pushFile(t, path, byFerry+":1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	digestRef := byFerry + "@" + res.Root.Digest.String()
	for _, pub := range []string{"ferry.pub", "cli.pub"} {
		if out, err := cosign.verify(filepath.Join(keys, pub), digestRef); err != nil {
			t.Fatalf("cosign verify --key %s of a ferry-signed package: %v\n%s", pub, err, out)
		}
	}
	// And a key cosign never signed with is refused by cosign too.
	_, strangerPub := keyPair(t, keys, "stranger")
	if out, err := cosign.verify(strangerPub.Name, digestRef); err == nil {
		t.Fatalf("cosign verify with an unrelated key passed:\n%s", out)
	}

	// A package pushed unsigned, signed by `cosign sign` with each key.
	unsigned := filepath.Join(t.TempDir(), "unsigned.tar.zst")
	create(t, w, unsigned)
	byCosign := w.Host + "/by-cosign/demo"
	if _, err := pushFile(t, unsigned, byCosign+":1.0.0", artifact.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	signRef := byCosign + "@" + res.Root.Digest.String()
	cosign.must("cli-pw", "sign", "--key", filepath.Join(keys, "cli.key"), "--tlog-upload=false", "--allow-http-registry", "-y", signRef)
	cosign.must("pw-ferry", "sign", "--key", filepath.Join(keys, "ferry.key"), "--tlog-upload=false", "--allow-http-registry", "-y", signRef)
	for _, k := range []artifact.Verifier{cliPub, ferryPub} {
		if _, err := verifyRemote(ctx, byCosign+":1.0.0", artifact.VerifyOptions{Keys: []artifact.Verifier{k}}); err != nil {
			t.Fatalf("ferry verify (registry) of a cosign-signed package with %s: %v", k.KeyName(), err)
		}
	}
	pulled := filepath.Join(t.TempDir(), "pulled.tar.zst")
	pr, err := pullRemote(ctx, byCosign+":1.0.0", pulled, artifact.PullOptions{Keys: []artifact.Verifier{cliPub}})
	if err != nil || len(pr.Signatures) != 1 {
		t.Fatalf("pull --key: %+v %v", pr, err)
	}
	vr, err := verifyFile(pulled, cliPub, ferryPub)
	if err != nil || len(vr.Signatures) != 2 {
		t.Fatalf("ferry verify (archive) of a cosign-signed package: %+v %v", vr, err)
	}
	// ferry adds its signature to cosign's manifest; cosign still verifies all.
	thirdKey, _ := keyPair(t, keys, "third")
	repo, tag, err := inRegistry(byCosign + ":1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Sign(ctx, repo, tag, thirdKey, artifact.SignOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, pub := range []string{"cli.pub", "ferry.pub", "third.pub"} {
		if out, err := cosign.verify(filepath.Join(keys, pub), signRef); err != nil {
			t.Fatalf("cosign verify --key %s after ferry appended a signature: %v\n%s", pub, err, out)
		}
	}
	// A wrong key fails pull before anything is written.
	refused := filepath.Join(t.TempDir(), "refused.tar.zst")
	if _, err := pullRemote(ctx, byCosign+":1.0.0", refused, artifact.PullOptions{Keys: []artifact.Verifier{strangerPub}}); !errors.Is(err, artifact.ErrSignature) {
		t.Fatalf("pull with a wrong key: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(refused), "*")); len(left) != 0 {
		t.Fatalf("a refused pull left %v", left)
	}
}
