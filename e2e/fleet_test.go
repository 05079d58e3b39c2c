package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/bomscan"
	"github.com/ferrypkg/ferry/deploy"
	"github.com/ferrypkg/ferry/deploy/api/v1alpha1"
	fleetv1 "github.com/ferrypkg/ferry/deploy/fleet/api/v1alpha1"
	"github.com/ferrypkg/ferry/deploy/fleet/wire"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/inject"
	"github.com/ferrypkg/ferry/internal/cluster"
)

// fleetCentre runs the centre's side of TestFleet: every command inside
// the management cluster's network namespace, as an operator there would.
type fleetCentre struct {
	t        testing.TB
	c        *harness.Centre
	ferry    string
	registry string // the centre's registry, on its loopback
	lastPid  int    // the process start started last
	ns       string // the centre's namespace, one per run
}

func (fc *fleetCentre) run(ctx context.Context, args ...string) (string, error) {
	fc.t.Helper()
	if args[0] == "fleet" {
		args = append(args, "--kubeconfig", fc.c.Kubeconfig, "-n", fc.ns)
	}
	out, err := fc.c.Command(ctx, fc.ferry, args...).Output()
	if err != nil {
		return "", fmt.Errorf("centre: ferry %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(exitStderr(err)))
	}
	return string(out), nil
}

func (fc *fleetCentre) must(ctx context.Context, args ...string) string {
	fc.t.Helper()
	out, err := fc.run(ctx, args...)
	if err != nil {
		fc.t.Fatal(err)
	}
	return out
}

func (fc *fleetCentre) json(ctx context.Context, v any, args ...string) {
	fc.t.Helper()
	out := fc.must(ctx, append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		fc.t.Fatalf("ferry %s printed %q: %v", strings.Join(args, " "), out, err)
	}
}

// member is one row of `ferry fleet members -o json`.
type fleetMember struct {
	Name     string                  `json:"name"`
	Mode     string                  `json:"mode"`
	Stale    bool                    `json:"stale"`
	Ready    string                  `json:"ready"`
	Packages []fleetv1.MemberPackage `json:"packages"`
}

func (fc *fleetCentre) member(ctx context.Context, name string) *fleetMember {
	fc.t.Helper()
	var ms []fleetMember
	fc.json(ctx, &ms, "fleet", "members")
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	return nil
}

// waitMember polls the centre's record of a member until ok says so.
func (fc *fleetCentre) waitMember(ctx context.Context, name, what string, ok func(*fleetMember) bool) *fleetMember {
	fc.t.Helper()
	var last *fleetMember
	err := harness.PollUntil(ctx, 3*time.Minute, func() (bool, error) {
		last = fc.member(ctx, name)
		return last != nil && ok(last), nil
	})
	if err != nil {
		fc.t.Fatalf("member %s: %s: %v; last seen %+v", name, what, err, last)
	}
	return last
}

// startIn starts a long-running ferry command in the centre's namespace
// and returns the first line it prints.
func (fc *fleetCentre) start(ctx context.Context, name string, args ...string) string {
	fc.t.Helper()
	cmd := fc.c.Command(ctx, fc.ferry, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fc.t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(fc.t.TempDir(), name+".log"))
	if err != nil {
		fc.t.Fatal(err)
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		fc.t.Fatal(err)
	}
	fc.lastPid = cmd.Process.Pid // nsenter and the front exec: the command's own
	fc.t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if fc.t.Failed() {
			data, _ := os.ReadFile(logf.Name())
			fc.t.Logf("%s's log:\n%s", name, tail(string(data), 40))
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		data, _ := os.ReadFile(logf.Name())
		fc.t.Fatalf("%s: %v: %s", name, err, data)
	}
	go io.Copy(io.Discard, stdout)
	return strings.TrimSpace(line)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

var reServing = regexp.MustCompile(`serving the fleet at https://(\S+) \(CA sha256:([a-f0-9]{64})\)`)

// TestFleet runs a fleet across two real clusters: the centre's (a control
// plane of its own in another network namespace, which has no route to the
// member) and this one, a member whose agent reaches the centre only through
// its own outbound connections (a relay in this namespace, the only route).
// A signed package placed on the member's group becomes Ready there with
// the group's values; a new version promoted rolls out; a version signed by
// a key the member does not trust is refused there (the centre shows why,
// the rollout halts, the running Pods are untouched) and rolled back; the
// route cut, the centre marks the member stale while it keeps running, and
// restored, it converges; refusals of the protocol; then the same cluster as
// a carried site, by files: report, import, bundle (the changed bytes only),
// deploy, report — and the centre shows the new version.
func TestFleet(t *testing.T) {
	c := harness.Get(t)
	mc := harness.GetCentre(t)
	ctx := timeout(t, 15*time.Minute)
	bin := binDir(t)
	if _, _, err := initFerry(ctx, c, inject.InitOptions{BinDir: bin}); err != nil {
		t.Fatal(err)
	}
	ns := cluster.DefaultNamespace
	const name = "e2e-fleet"
	t.Cleanup(func() {
		cs := c.Client.CoreV1().Secrets(ns)
		cs.Delete(context.Background(), "ferry-fleet", metav1.DeleteOptions{})
		forgetPackage(context.Background(), t, c, name)
	})
	priv, pub, _ := trustNewKey(ctx, t, c)
	stranger, _ := testKeys(t)
	pc, err := deploy.PackageClient(c.Config)
	if err != nil {
		t.Fatal(err)
	}

	// A namespace of this run's at the centre: the management cluster
	// outlives a run when it is kept up by hand.
	fc := &fleetCentre{t: t, c: mc, ferry: filepath.Join(bin, "ferry"), registry: "127.0.0.1:5100", ns: "fleet-" + strconv.FormatInt(time.Now().Unix(), 36)}
	fc.start(ctx, "registry", "registry", "serve", "--addr", fc.registry, "--root", t.TempDir())
	line := fc.start(ctx, "centre", "fleet", "serve", "--kubeconfig", mc.Kubeconfig, "-n", fc.ns, "--registry", fc.registry,
		"--addr", "127.0.0.1:8443", "--host", "10.200.0.1", "--interval", "5s")
	m := reServing.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("fleet serve printed %q", line)
	}
	pin := m[2]
	// The member's only way to the centre: this namespace's 10.200.0.1
	// (the node's address, which its Pods reach) relayed into the centre's.
	relay := harness.StartRelay(t, "10.200.0.1:18443", mc.NetnsPath(), "127.0.0.1:8443")
	url := "https://" + relay.Addr

	// Three versions: two signed by the key the member trusts, one by a
	// stranger's; pushed to the centre's registry.
	// The first two carry SBOMs, for the fleet's search and audit.
	v1, _ := chartPackageWith(ctx, t, c, name, "1.0.0", "fleet-1", name, priv, sbomGenerator(t, bin))
	v2, _ := chartPackageWith(ctx, t, c, name, "2.0.0", "fleet-2", name, priv, sbomGenerator(t, bin))
	v3, _ := chartPackage(ctx, t, c, name, "3.0.0", "fleet-3", name, stranger)
	digests := map[string]string{}
	for v, p := range map[string]string{"1.0.0": v1, "2.0.0": v2, "3.0.0": v3} {
		fc.must(ctx, "package", "push", p, fc.registry+"/apps/"+name+":"+v)
		r, err := artifact.Open(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		digests[v] = r.Root().Digest.String()
	}

	// Joining: a token for one member, pinned to the centre's CA.
	var tok struct {
		Token string `json:"token"`
	}
	fc.json(ctx, &tok, "fleet", "token", "create", "--uses", "1", "--label", "env=e2e")
	if tk, err := wire.ParseToken(tok.Token); err != nil || tk.CA != pin {
		t.Fatalf("token %v pins %v, want the centre's CA %s", err, tk.CA, pin)
	}
	start := time.Now()
	memberFerry(ctx, t, c, bin, "fleet", "join", url, "--token", tok.Token, "--name", "site-a", "--label", "site=a")
	t.Logf("joined in %.1fs", time.Since(start).Seconds())

	// Refused, each in one line, nothing changed: the used-up token, a
	// token pinning another CA (nothing sent), a forged credential.
	direct := &wire.Client{URL: url, Pin: pin}
	sk, err := wire.NewSiteKey()
	if err != nil {
		t.Fatal(err)
	}
	skPEM, _ := sk.PublicPEM()
	if _, err := direct.Join(ctx, wire.JoinRequest{Token: tok.Token, Name: "site-x", PublicKey: string(skPEM)}); err == nil || !strings.Contains(err.Error(), "used") {
		t.Fatalf("a used-up token: %v", err)
	}
	other := &wire.Client{URL: url, Pin: strings.Repeat("0", 64)}
	if _, err := other.Join(ctx, wire.JoinRequest{Token: tok.Token, Name: "site-x"}); err == nil || !strings.Contains(err.Error(), "pins") {
		t.Fatalf("another CA: %v", err)
	}
	forged := &wire.Client{URL: url, Pin: pin, Credential: "site-a." + strings.Repeat("ab", 32)}
	if _, err := forged.Sync(ctx, &wire.Report{Member: "site-a"}); err == nil {
		t.Fatal("a forged credential was answered")
	}
	if fc.member(ctx, "site-x") != nil {
		t.Fatal("a refused join made a member")
	}

	// A placement: the group of the member, stable = 1.0.0, its values.
	fc.must(ctx, "fleet", "group", "e2e", "--selector", "env=e2e")
	fc.must(ctx, "fleet", "promote", name, "stable", digests["1.0.0"], "--repository", "apps/"+name, "--registry", fc.registry)
	fc.must(ctx, "fleet", "place", name, "--track", name, "--channel", "stable", "--group", "e2e", "--set", "greeting=from-the-centre")
	pkg := waitFleetPackage(ctx, t, pc, name, digests["1.0.0"])
	cm, err := c.Client.CoreV1().ConfigMaps(name).Get(ctx, name+"-config", metav1.GetOptions{})
	if err != nil || cm.Data["greeting"] != "from-the-centre" {
		t.Fatalf("the group's values did not arrive: %v %v", cm.Data, err)
	}
	if pkg.Labels["fleet.ferry.dev/placement"] != name {
		t.Fatalf("Package labels %v", pkg.Labels)
	}
	assertOwnKeys(ctx, t, c, pkg)
	fc.waitMember(ctx, "site-a", "Ready at 1.0.0", func(m *fleetMember) bool { return hasPackage(m, name, digests["1.0.0"], true) })
	t.Logf("1.0.0 placed and Ready in %.1fs", time.Since(start).Seconds())

	// A new version on the channel rolls out.
	start = time.Now()
	fc.must(ctx, "fleet", "promote", name, "stable", digests["2.0.0"], "--registry", fc.registry)
	waitFleetPackage(ctx, t, pc, name, digests["2.0.0"])
	fc.waitMember(ctx, "site-a", "Ready at 2.0.0", func(m *fleetMember) bool { return hasPackage(m, name, digests["2.0.0"], true) })
	t.Logf("2.0.0 rolled out in %.1fs", time.Since(start).Seconds())
	fleetSBOMs(ctx, t, fc, bin, name, v2)
	pods := podUIDs(ctx, t, c, name)

	// A version the member's keys do not verify: refused there, shown at
	// the centre, the rollout halted, nothing changed at the member.
	fc.must(ctx, "fleet", "promote", name, "stable", digests["3.0.0"], "--registry", fc.registry)
	refused := fc.waitMember(ctx, "site-a", "refusing 3.0.0", func(m *fleetMember) bool {
		for _, p := range m.Packages {
			if p.Name == name && p.Refused && p.Target == digests["3.0.0"] {
				return true
			}
		}
		return false
	})
	t.Logf("refused: %+v", refused.Packages)
	// The centre's next pass halts the rollout (the refusal came with a
	// report; the rollout steps a second later).
	var pls []fleetv1.Placement
	waitOK(ctx, t, "the rollout of 3.0.0 halted naming site-a", func() error {
		fc.json(ctx, &pls, "fleet", "rollouts", name)
		if len(pls) != 1 {
			return fmt.Errorf("%d placements", len(pls))
		}
		if pls[0].Status.Phase != fleetv1.PhaseHalted || !strings.Contains(pls[0].Status.Message, "site-a") {
			return fmt.Errorf("phase %q, message %q", pls[0].Status.Phase, pls[0].Status.Message)
		}
		return nil
	})
	var p v1alpha1.Package
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil || p.Status.Digest != digests["2.0.0"] {
		t.Fatalf("the member's Package moved: %v %v", p.Status.Digest, err)
	}
	if now := podUIDs(ctx, t, c, name); strings.Join(now, ",") != strings.Join(pods, ",") {
		t.Fatalf("the running Pods changed: %v → %v", pods, now)
	}
	fc.must(ctx, "fleet", "rollback", name)
	waitOK(ctx, t, "the rollback", func() error {
		fc.json(ctx, &pls, "fleet", "rollouts", name)
		h := pls[0].Status.History
		if len(h) < 4 || h[0].Action != "rollback" || h[0].Result != fleetv1.PhaseComplete || h[0].By == "" || h[0].To != digests["2.0.0"] {
			return fmt.Errorf("history %+v", h)
		}
		return nil
	})
	fc.waitMember(ctx, "site-a", "back at 2.0.0", func(m *fleetMember) bool { return hasPackage(m, name, digests["2.0.0"], true) })

	// The route cut: the centre marks the member stale; it keeps running.
	relay.Cut()
	fc.waitMember(ctx, "site-a", "stale", func(m *fleetMember) bool { return m.Stale })
	if err := pc.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil || !meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.Ready) {
		t.Fatalf("cut off, the member's package stopped: %v", err)
	}
	relay.Restore()
	fc.waitMember(ctx, "site-a", "fresh again", func(m *fleetMember) bool { return !m.Stale && hasPackage(m, name, digests["2.0.0"], true) })

	// Revoked: cut off at once.
	fc.must(ctx, "fleet", "revoke", "site-a")
	waitOK(ctx, t, "the member cut off", func() error {
		var st struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal([]byte(memberFerry(ctx, t, c, bin, "fleet", "status", "-o", "json")), &st); err != nil {
			return err
		}
		if !strings.Contains(st.Error, "revoked") {
			return fmt.Errorf("the member's last error is %q", st.Error)
		}
		t.Logf("revoked: %s", st.Error)
		return nil
	})

	// The same cluster as a carried site: nothing but files.
	if err := c.Client.CoreV1().Secrets(ns).Delete(ctx, "ferry-fleet", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fc.json(ctx, &tok, "fleet", "token", "create", "--uses", "1", "--label", "env=carried")
	dir := t.TempDir()
	report := filepath.Join(dir, "site-report.json")
	memberFerry(ctx, t, c, bin, "fleet", "report", "-f", report, "--token", tok.Token, "--name", "ship-b")
	fc.must(ctx, "fleet", "import", report, "--registry", fc.registry)
	fc.waitMember(ctx, "ship-b", "carried, at 2.0.0", func(m *fleetMember) bool {
		return m.Mode == fleetv1.Carried && hasPackage(m, name, digests["2.0.0"], true)
	})
	fc.must(ctx, "fleet", "group", "carried", "--selector", "env=carried")
	v4, _ := chartPackage(ctx, t, c, name, "4.0.0", "fleet-4", name, priv)
	fc.must(ctx, "package", "push", v4, fc.registry+"/apps/"+name+":4.0.0")
	r4, err := artifact.Open(ctx, v4)
	if err != nil {
		t.Fatal(err)
	}
	fc.must(ctx, "fleet", "promote", name, "carried", "4.0.0", "--registry", fc.registry)
	fc.must(ctx, "fleet", "place", name+"-ships", "--track", name, "--channel", "carried", "--group", "carried")
	bundle := filepath.Join(dir, "update.tar.zst")
	var bres struct {
		Delta artifact.DeltaResult `json:"delta"`
	}
	waitOK(ctx, t, "the bundle", func() error {
		out, err := fc.run(ctx, "fleet", "bundle", "ship-b", "-f", bundle, "--registry", fc.registry, "-o", "json")
		if err != nil {
			return err
		}
		return json.Unmarshal([]byte(out), &bres)
	})
	res := bres.Delta
	whole, err := os.Stat(v4)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bundle: %d bytes (%d blobs carried, %d B; %d left out, %d B) of a %d-byte package", res.Size, res.Carried, res.CarriedSize, res.Omitted, res.OmittedSize, whole.Size())
	if res.Root.Digest != r4.Root().Digest || res.Omitted == 0 || res.Size >= whole.Size() {
		t.Fatalf("the bundle is not a delta of 4.0.0: %+v", res)
	}
	memberFerry(ctx, t, c, bin, "deploy", bundle, "--key", pub.Name)
	memberFerry(ctx, t, c, bin, "fleet", "report", "-f", report)
	fc.must(ctx, "fleet", "import", report, "--registry", fc.registry)
	fc.waitMember(ctx, "ship-b", "at 4.0.0", func(m *fleetMember) bool { return hasPackage(m, name, r4.Root().Digest.String(), true) })

	// A replayed (older) report is refused.
	if _, err := fc.run(ctx, "fleet", "import", report, "--registry", fc.registry); err == nil {
		t.Fatal("a replayed report was imported")
	}
	memberFerry(ctx, t, c, bin, "remove", name)
}

// memberFerry runs the ferry CLI against the member cluster.
func memberFerry(ctx context.Context, t *testing.T, c *harness.Cluster, bin string, args ...string) string {
	t.Helper()
	args = append(args, "--kubeconfig", c.Kubeconfig)
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "ferry"), args...).Output()
	if err != nil {
		t.Fatalf("member: ferry %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(exitStderr(err)))
	}
	return string(out)
}

func waitOK(ctx context.Context, t *testing.T, what string, fn func() error) {
	t.Helper()
	var last error
	if err := harness.PollUntil(ctx, 2*time.Minute, func() (bool, error) { last = fn(); return last == nil, nil }); err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

func hasPackage(m *fleetMember, name, digest string, ready bool) bool {
	for _, p := range m.Packages {
		if p.Name == name && p.Digest == digest && p.Ready == ready {
			return true
		}
	}
	return false
}

// waitFleetPackage waits until the member's Package runs digest, Ready.
func waitFleetPackage(ctx context.Context, t *testing.T, pc client.Client, name, digest string) *v1alpha1.Package {
	t.Helper()
	var p v1alpha1.Package
	err := harness.PollUntil(ctx, 4*time.Minute, func() (bool, error) {
		if err := pc.Get(ctx, client.ObjectKey{Namespace: cluster.DefaultNamespace, Name: name}, &p); err != nil {
			return false, err
		}
		return p.Status.Digest == digest && meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.Ready), nil
	})
	if err != nil {
		t.Fatalf("Package %s at %s: %v (status %s %v)", name, digest, err, p.Status.Digest, p.Status.Conditions)
	}
	return &p
}

// assertOwnKeys checks that a fleet Package names only the member's own
// trusted key Secrets.
func assertOwnKeys(ctx context.Context, t *testing.T, c *harness.Cluster, p *v1alpha1.Package) {
	t.Helper()
	if len(p.Spec.Keys) == 0 {
		t.Fatal("the fleet's Package names no key")
	}
	for _, k := range p.Spec.Keys {
		s, err := c.Client.CoreV1().Secrets(p.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
		if err != nil || s.Labels[deploy.KeyLabel] != "true" {
			t.Fatalf("the Package names key %s, not one of the member's trusted keys: %v", k.Name, err)
		}
	}
}

func podUIDs(ctx context.Context, t *testing.T, c *harness.Cluster, ns string) []string {
	t.Helper()
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning {
			out = append(out, string(p.UID))
		}
	}
	return out
}

// fleetSBOMs searches and audits the fleet at its centre: the versions its
// tracks hold, each named with the members that run it (site-a runs
// 2.0.0, whose package is pkg).
func fleetSBOMs(ctx context.Context, t *testing.T, fc *fleetCentre, bin, name, pkg string) {
	t.Helper()
	std := stdlibOf(ctx, t, bin, pkg)
	at := []string{"--fleet", "--kubeconfig", fc.c.Kubeconfig, "-n", fc.ns, "--registry", fc.registry, "-o", "json"}
	start := time.Now()
	var hits []bomscan.Hit
	fc.json(ctx, &hits, append([]string{"sbom", "query", "pkg:golang/stdlib"}, at[:len(at)-2]...)...)
	running := hitsRunningIn(hits, name, "member site-a")
	if len(running) == 0 || running[0].Version != "2.0.0" || running[0].Component.Version != std.Version {
		t.Fatalf("the fleet's search did not name 2.0.0 running at site-a: %+v", hits)
	}
	for _, h := range hitsRunningIn(hits, name, "member ") {
		if h.Version != "2.0.0" {
			t.Fatalf("version %s shown running at %v: only 2.0.0 runs", h.Version, h.Runs)
		}
	}
	t.Logf("fleet search: %d hits in %.2fs", len(hits), time.Since(start).Seconds())

	const advisoryID = "FERRY-E2E-FLEET-1"
	cmd := fc.c.Command(ctx, fc.ferry, append([]string{"sbom", "audit", "--db", osvFolder(t, advisoryID)}, at...)...)
	out, status := ferryExit(ctx, t, cmd)
	var rep auditJSON
	if status != 3 || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("ferry sbom audit --fleet: exit %d (want 3), printed %q", status, out)
	}
	var names []string
	for _, f := range rep.Findings {
		if f.Match.ID == advisoryID {
			names = append(names, f.Version+" "+strings.Join(f.Runs, ","))
		}
	}
	if !slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "2.0.0 ") && strings.Contains(s, "member site-a") }) {
		t.Fatalf("the fleet's audit did not name site-a running 2.0.0: %v", names)
	}
	t.Logf("fleet audit: %d findings of %s: %v", len(names), advisoryID, names)
}
