package member

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
)

// run starts the agent's loop until the test ends.
func run(t *testing.T, a *Agent) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitJoined(t *testing.T, m *member) (*Status, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return WaitJoined(ctx, m.cs, ns)
}

// TestJoin: without the Secret the agent idles; with a URL and a token it
// makes the site key, trades the token over the pinned CA and keeps the
// credential, its name and the CA, and forgets the token. A token the
// centre refuses leaves its sentence in the Secret (one line), and the
// site key made for it is the one the next join uses.
func TestJoin(t *testing.T) {
	c := newCentre(t)
	m := newMember(t)
	run(t, m.agent(t))
	time.Sleep(100 * time.Millisecond)
	if req, _, _, _ := c.count(); req != 0 {
		t.Fatalf("the agent spoke to the centre %d times without a Secret", req)
	}
	if _, err := ReadStatus(context.Background(), m.cs, ns); !errors.Is(err, ErrNotMember) {
		t.Fatalf("ReadStatus without the Secret: %v", err)
	}

	// A token of the right shape that the centre does not know.
	wrong, err := wire.NewToken(c.token.CA)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"env": "prod", "example.com/tier": "edge"}
	// The centre's own labels are not a member's to ask for.
	if err := WriteJoin(context.Background(), m.cs, ns, Config{URL: c.srv.URL, Token: wrong.String(), Name: "site-a",
		Labels: map[string]string{"fleet.ferry.dev/canary": "true"}}); err == nil || !strings.Contains(err.Error(), "the centre's to give") {
		t.Fatalf("join asking to be a canary: %v", err)
	}
	if err := WriteJoin(context.Background(), m.cs, ns, Config{URL: c.srv.URL, Token: wrong.String(), Name: "site-a", Labels: labels}); err != nil {
		t.Fatal(err)
	}
	st, err := waitJoined(t, m)
	if !errors.Is(err, ErrJoin) || st.Joined || !oneLineMessage(st.Error) || !strings.Contains(st.Error, "token is unknown") {
		t.Fatalf("join with an unknown token: %+v, %v", st, err)
	}
	key := string(m.secret(t)[keySiteKey])
	if key == "" || st.PublicKey == "" {
		t.Fatal("no site key made before the join")
	}

	// The right token.
	if err := WriteJoin(context.Background(), m.cs, ns, Config{URL: c.srv.URL, Token: c.token.String(), Name: "site-a", Labels: labels}); err != nil {
		t.Fatal(err)
	}
	st, err = waitJoined(t, m)
	if err != nil || !st.Joined || st.Member != "site-a" || st.Error != "" || st.Pending {
		t.Fatalf("join: %+v, %v", st, err)
	}
	data := m.secret(t)
	var seen wire.JoinRequest
	var cred string
	c.set(func(c *centre) { seen, cred = c.joined, c.credential })
	switch {
	case string(data[keySiteKey]) != key:
		t.Fatal("the site key was made again")
	case len(data[keyToken]) != 0:
		t.Fatal("the token is kept after the trade")
	case string(data[keyCA]) != string(c.caPEM):
		t.Fatalf("the CA kept is not the centre's:\n%s", data[keyCA])
	case string(data[keyCredential]) != cred:
		t.Fatal("the credential kept is not the centre's")
	case seen.PublicKey != st.PublicKey || seen.Name != "site-a" || seen.Labels["env"] != "prod" || seen.Agent != "test":
		t.Fatalf("the centre was told %+v", seen)
	}
	// And it syncs.
	deadline := time.Now().Add(10 * time.Second)
	for _, _, syncs, _ := c.count(); syncs == 0; _, _, syncs, _ = c.count() {
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat after the join")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rep := c.lastReport(); rep.Member != "site-a" || rep.Receipt == nil {
		t.Fatalf("first heartbeat: member %q, receipt %d bytes", rep.Member, len(rep.Receipt))
	}
}

// TestJoinPinsCA: a token pinning another CA than the centre's: the join
// fails in the TLS handshake, before a request is sent, and says so in
// the Secret.
func TestJoinPinsCA(t *testing.T) {
	c := newCentre(t)
	m := newMember(t)
	other := wire.Token{ID: c.token.ID, Secret: c.token.Secret, CA: strings.Repeat("ab", 32)}
	if err := WriteJoin(context.Background(), m.cs, ns, Config{URL: c.srv.URL, Token: other.String()}); err != nil {
		t.Fatal(err)
	}
	run(t, m.agent(t))
	st, err := waitJoined(t, m)
	if !errors.Is(err, ErrJoin) || !oneLineMessage(st.Error) || !strings.Contains(st.Error, "not from the CA the token pins") {
		t.Fatalf("join with another CA's pin: %+v, %v", st, err)
	}
	if req, joins, _, _ := c.count(); req != 0 || joins != 0 {
		t.Fatalf("the centre saw %d requests (%d joins) from a member that does not trust it", req, joins)
	}
	if strings.Contains(st.Error, c.token.Secret) {
		t.Fatal("the error repeats the token's secret")
	}
}

// TestWriteJoin: what join is given is checked before it is written, and
// a member that joined is not replaced unless forced (its site key kept).
func TestWriteJoin(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	tok, err := wire.NewToken(strings.Repeat("0", 64))
	if err != nil {
		t.Fatal(err)
	}
	good := Config{URL: "https://centre.example:8443", Token: tok.String(), Name: "site-a", Labels: map[string]string{"env": "prod"}}
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"plain http", func(c *Config) { c.URL = "http://centre.example" }, "is not https://host[:port]"},
		{"a path", func(c *Config) { c.URL = "https://centre.example/x" }, "is not https://host[:port]"},
		{"no token", func(c *Config) { c.Token = "" }, "not a fleet join token"},
		{"bad token", func(c *Config) { c.Token = "ff1.abc.def" }, "not a fleet join token"},
		{"bad name", func(c *Config) { c.Name = "Site_A" }, "is not a DNS label"},
		{"bad label", func(c *Config) { c.Labels = map[string]string{"a b": "c"} }, `label "a b"`},
		{"bad label value", func(c *Config) { c.Labels = map[string]string{"a": strings.Repeat("v", 64)} }, "label a="},
		{"bad mode", func(c *Config) { c.Mode = "Sometimes" }, "is neither Connected nor Carried"},
		{"carried without a name", func(c *Config) { c.Mode, c.Name = v1alpha1.Carried, "" }, "needs a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			err := WriteJoin(ctx, cs, ns, cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), tok.Secret) {
				t.Fatalf("WriteJoin: %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := cs.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{}); err == nil {
		t.Fatal("a refused join wrote the Secret")
	}
	if err := WriteJoin(ctx, cs, ns, good); err != nil {
		t.Fatal(err)
	}
	// The agent joined: a site key and a credential.
	if _, err := mutate(ctx, cs, ns, false, func(s *state) error {
		if err := s.ensureKey(); err != nil {
			return err
		}
		s.Credential, s.Token, s.JoinedAt = "site-a."+strings.Repeat("1", 64), "", time.Now()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, _ := ReadStatus(ctx, cs, ns)
	if err := WriteJoin(ctx, cs, ns, good); !errors.Is(err, ErrJoined) || !strings.Contains(err.Error(), "site-a") {
		t.Fatalf("WriteJoin over a joined member: %v", err)
	}
	forced := good
	forced.Force, forced.Name = true, "site-b"
	if err := WriteJoin(ctx, cs, ns, forced); err != nil {
		t.Fatal(err)
	}
	after, err := ReadStatus(ctx, cs, ns)
	if err != nil || after.Joined || !after.Pending || after.Member != "site-b" || after.PublicKey != st.PublicKey {
		t.Fatalf("after a forced join: %+v, %v (before %+v)", after, err, st)
	}
}
