package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/key"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
	"github.com/ferrypkg/ferry/e2e/internal/mkimg"
)

// Argo CD as TestArgoCD runs it: e2e/cluster/build-argocd.sh's build
// (bin/argocd, bin/helm, bin/kustomize in the e2e cache; install.yaml and
// git-verify-wrapper.sh in argocd/), its images under the references
// install.yaml names, in the namespace its ClusterRoleBindings name. The
// cluster has no DNS: Redis, the repo server and the server take fixed
// cluster IPs in the Service range's static band (Flux's source-controller
// has 10.96.0.10), and argocd-cmd-params-cm names them by address.
const (
	argoVersion   = "v3.6.1"
	argoNamespace = "argocd"
	argoImage     = "quay.io/argoproj/argocd:" + argoVersion
	argoRedis     = "public.ecr.aws/docker/library/redis:8.10.1-alpine"
	argoRedisIP   = "10.96.0.11"
	argoRepoIP    = "10.96.0.12"
	argoServerIP  = "10.96.0.13"
)

// argoCommands are the names Argo CD's image links to its one binary
// (its Dockerfile's ln -s list), by which the binary knows what to run.
var argoCommands = []string{"argocd", "argocd-server", "argocd-repo-server", "argocd-cmp-server", "argocd-application-controller",
	"argocd-dex", "argocd-notifications", "argocd-applicationset-controller", "argocd-k8s-auth", "argocd-commit-server"}

// argoCache returns the e2e cache holding Argo CD's build; without it the
// test is skipped, or fails under FERRY_REQUIRE_ARGOCD=1 (make e2e-argocd).
func argoCache(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FERRY_E2E_CACHE")
	if dir == "" {
		if home, err := os.UserCacheDir(); err == nil {
			dir = filepath.Join(home, "ferry-e2e")
		}
	}
	for _, p := range []string{"bin/argocd", "bin/helm", "bin/kustomize", "argocd/manifests/install.yaml", "argocd/git-verify-wrapper.sh"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			msg := fmt.Sprintf("Argo CD's build is not in the e2e cache %q (make e2e-argocd-build): %v", dir, err)
			if os.Getenv("FERRY_REQUIRE_ARGOCD") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return dir
}

// argoImageOptions is Argo CD's image as its Dockerfile makes it, from
// this machine's Debian where it installs packages: the binary at
// /usr/local/bin under each of its names, helm, kustomize and
// git-verify-wrapper.sh beside it; git (with its http remote helper), dash
// as /bin/sh and the cp and ln its repo server's init container runs, each
// with its shared libraries; user argocd (999). No entrypoint (theirs is
// tini): install.yaml's args are the command. GPG is off, as the image has
// no gpg.
func argoImageOptions(t *testing.T, cache string) ([]byte, mkimg.Options) {
	t.Helper()
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	binary := read(filepath.Join(cache, "bin", "argocd"))
	var hostProgs []string
	for _, p := range []string{"/usr/bin/git", "/usr/lib/git-core/git-remote-http", "/usr/bin/dash", "/usr/bin/cp", "/usr/bin/ln"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatalf("Argo CD's image needs %s (apt-get install git dash coreutils): %v", p, err)
		}
		hostProgs = append(hostProgs, real)
	}
	exe, err := mkimg.HostFiles(hostProgs...)
	if err != nil {
		t.Fatal(err)
	}
	exe["/usr/local/bin/helm"] = read(filepath.Join(cache, "bin", "helm"))
	exe["/usr/local/bin/kustomize"] = read(filepath.Join(cache, "bin", "kustomize"))
	exe["/usr/local/bin/git-verify-wrapper.sh"] = read(filepath.Join(cache, "argocd", "git-verify-wrapper.sh"))
	links := []string{}
	for _, name := range argoCommands {
		links = append(links, "/usr/local/bin/"+name)
	}
	symlinks := map[string]string{
		"/bin/sh": hostProgs[2], "/bin/cp": hostProgs[3], "/bin/ln": hostProgs[4],
		"/usr/lib/git-core/git-remote-https": "git-remote-http",
	}
	if hostProgs[0] != "/usr/lib/git-core/git" {
		symlinks["/usr/lib/git-core/git"] = hostProgs[0]
	}
	return binary, mkimg.Options{
		Path:        "argocd",
		Links:       links,
		Executables: exe,
		Symlinks:    symlinks,
		Files: map[string][]byte{
			"/etc/passwd": []byte("root:x:0:0:root:/root:/bin/sh\nargocd:x:999:999:argocd:/home/argocd:/bin/sh\n"),
			"/etc/group":  []byte("root:x:0:\nargocd:x:999:\n"),
		},
		Entrypoint: []string{},
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "USER=argocd",
			"GRPC_ENABLE_TXT_SERVICE_CONFIG=false", "ARGOCD_GPG_ENABLED=false"},
		User: "999",
	}
}

// redisImageOptions is Redis's image, Debian's redis-server with its shared
// libraries, user redis (999, as install.yaml runs it); the entrypoint is
// the server, install.yaml's args its options.
func redisImageOptions(t *testing.T) ([]byte, mkimg.Options) {
	t.Helper()
	server, err := filepath.EvalSymlinks("/usr/bin/redis-server")
	if err != nil {
		t.Fatalf("Redis's image needs Debian's redis-server (apt-get install redis-server): %v", err)
	}
	libs, err := mkimg.HostFiles(server)
	if err != nil {
		t.Fatal(err)
	}
	binary := libs[server]
	delete(libs, server)
	return binary, mkimg.Options{
		Path:        "redis-server",
		Links:       []string{"/usr/local/bin/redis-server", "/usr/bin/redis-server"},
		Executables: libs,
		Files: map[string][]byte{
			"/etc/passwd": []byte("root:x:0:0:root:/root:/bin/sh\nredis:x:999:999:redis:/data:/bin/sh\n"),
			"/etc/group":  []byte("root:x:0:\nredis:x:999:\n"),
		},
		User: "999",
	}
}

// argoManifests adapts Argo CD's install.yaml to the e2e cluster: without
// Dex and the notifications controller (no login, no notifications here),
// Redis, the repo server and the server on fixed cluster IPs, and
// argocd-cmd-params-cm naming those addresses (no DNS) and serving the UI
// and API over plain HTTP. Everything else is as released: the CRDs, RBAC,
// the application and ApplicationSet controllers, Redis's password
// init container, the repo server's copyutil init container.
func argoManifests(t *testing.T, cache string) string {
	t.Helper()
	var out []string
	ips := map[string]string{"argocd-redis": argoRedisIP, "argocd-repo-server": argoRepoIP, "argocd-server": argoServerIP}
	for _, o := range decodeObjects(t, filepath.Join(cache, "argocd", "manifests", "install.yaml")) {
		name := o.GetName()
		if o.GetKind() != "ClusterRole" && o.GetKind() != "ClusterRoleBinding" && (strings.Contains(name, "dex") || strings.Contains(name, "notifications")) {
			continue
		}
		switch {
		case o.GetKind() == "Service" && ips[name] != "":
			_ = unstructured.SetNestedField(o.Object, ips[name], "spec", "clusterIP")
		case o.GetKind() == "ConfigMap" && name == "argocd-cmd-params-cm":
			_ = unstructured.SetNestedStringMap(o.Object, map[string]string{
				"redis.server":    argoRedisIP + ":6379",
				"repo.server":     argoRepoIP + ":8081",
				"server.insecure": "true",
			}, "data")
		}
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(b))
	}
	return strings.Join(out, "---\n")
}

// argoPackage makes a signed package of Argo CD: its two images and the
// adapted install.yaml in argoNamespace.
func argoPackage(ctx context.Context, t *testing.T, cache string, priv *key.Private) *artifact.Reader {
	t.Helper()
	dir := t.TempDir()
	bin, opts := argoImageOptions(t, cache)
	layoutTagged(ctx, t, dir, "argocd", bin, opts)
	bin, opts = redisImageOptions(t)
	layoutTagged(ctx, t, dir, "redis", bin, opts)
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "argocd.yaml"), []byte(argoManifests(t, cache)), 0o644); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: e2e-argocd, version: %s}
platforms: [linux/%s]
components:
  - name: argocd
    images:
      - {ref: %s, layout: images, tag: argocd}
      - {ref: %s, layout: images, tag: redis}
    manifests:
      - {name: argocd, namespace: %s, files: [manifests]}
`, strings.TrimPrefix(argoVersion, "v"), runtime.GOARCH, argoImage, argoRedis, argoNamespace)
	return createPackage(ctx, t, dir, def, priv)
}

// argoFleetSource makes the git repository the Applications name, with
// Debian's git, and returns its folder: plain/ (a ConfigMap "plain" of
// data version=1 and a Deployment "web" of docker.io/acme/web:1.0),
// kustomize/ (a kustomization of a ConfigMap, namePrefix kust-),
// values/web.yaml (message: from-git, for the chart) and set/one, set/two
// (a ConfigMap each, for the ApplicationSet).
func argoFleetSource(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	gitCmd(t, src, "init", "-q", "-b", "main")
	for name, data := range map[string]string{
		"plain/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {version: \"1\"}\n",
		"plain/deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers: [{name: web, image: docker.io/acme/web:1.0}]
`,
		"kustomize/kustomization.yaml": "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: kust-\nresources: [configmap.yaml]\n",
		"kustomize/configmap.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {from: kustomize}\n",
		"values/web.yaml":              "message: from-git\n",
		"set/one/configmap.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: set-one}\ndata: {element: one}\n",
		"set/two/configmap.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: set-two}\ndata: {element: two}\n",
	} {
		writeFile(t, filepath.Join(src, name), data)
	}
	gitCmd(t, src, "add", ".")
	gitCmd(t, src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "fleet")
	return src
}

// argoNextCommit commits plain/configmap.yaml with data version=v in src.
func argoNextCommit(t *testing.T, src, v string) {
	t.Helper()
	writeFile(t, filepath.Join(src, "plain", "configmap.yaml"), fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {version: %q}\n", v))
	gitCmd(t, src, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-am", "version "+v)
}

func writeFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// argoFleetPackage makes version of the signed package e2e-argo-fleet: the
// repository src as https://git.example.com/acme/fleet.git (branch main),
// the image docker.io/acme/web:1.0 (the tiny program, pausing) and the
// chart web 1.0.0 as the OCI artifact ghcr.io/acme/charts/web:1.0.0.
func argoFleetPackage(ctx context.Context, t *testing.T, c *harness.Cluster, priv *key.Private, src, version string) *artifact.Reader {
	t.Helper()
	dir := t.TempDir()
	gitCmd(t, "", "clone", "-q", src, filepath.Join(dir, "fleet"))
	layoutTagged(ctx, t, dir, "web", c.Tiny(t), mkimg.Options{Cmd: []string{"pause"}, Labels: map[string]string{"e2e": "argocd"}})
	argoChart(ctx, t, dir, "chart")
	def := fmt.Sprintf(`apiVersion: ferry.dev/v1alpha1
kind: Package
metadata: {name: e2e-argo-fleet, version: %[2]s}
platforms: [linux/%[1]s]
components:
  - name: gitops
    images:
      - {ref: docker.io/acme/web:1.0, layout: images, tag: web}
      - {ref: ghcr.io/acme/charts/web:1.0.0, layout: images, tag: chart, platform: linux/%[1]s}
    repositories:
      - {url: "https://git.example.com/acme/fleet.git", path: fleet, ref: main}
`, runtime.GOARCH, version)
	return createPackage(ctx, t, dir, def, priv)
}

// argoChart stores the chart web 1.0.0, a ConfigMap <release>-web whose
// data message is the value message (default: "default"), as Helm pushes a
// chart to an OCI registry, in the layout dir/images under tag.
func argoChart(ctx context.Context, t *testing.T, dir, tag string) {
	t.Helper()
	helmChartLayout(ctx, t, dir, tag,
		[2]string{"web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 1.0.0\n"},
		[2]string{"web/values.yaml", "message: default\n"},
		[2]string{"web/templates/configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-web}\ndata: {message: {{ .Values.message | quote }}}\n"})
}

// TestArgoCDImages runs the programs of Argo CD's and Redis's images in a
// chroot of their layers, as root, with no cluster: each image holds what
// its programs load (git's http helper and libraries, /bin/sh for
// git-verify-wrapper.sh, helm, kustomize). Skipped without Argo CD's build.
func TestArgoCDImages(t *testing.T) {
	cache := argoCache(t)
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	for _, img := range []struct {
		name  string
		build func() ([]byte, mkimg.Options)
		run   [][]string
	}{
		{"argocd", func() ([]byte, mkimg.Options) { return argoImageOptions(t, cache) }, [][]string{
			{"/bin/sh", "-c", "true"},
			{"/usr/bin/git", "--version"},
			{"/usr/local/bin/argocd", "version", "--client", "--short"},
			{"/usr/local/bin/argocd-repo-server", "--help"},
			{"/usr/local/bin/helm", "version", "--short"},
			{"/usr/local/bin/kustomize", "version"},
			{"/bin/sh", "-c", "/bin/cp /usr/local/bin/git-verify-wrapper.sh /tmp/w && /bin/ln -sf /tmp/w /tmp/l && test -L /tmp/l"},
			{"/bin/sh", "-c", "cd /tmp/r && git init -q && git -c user.name=t -c user.email=t@e commit -q --allow-empty -m x && git-verify-wrapper.sh HEAD"},
			// A missing remote helper says so; a present one fails to connect.
			{"/bin/sh", "-c", `out=$(git ls-remote http://127.0.0.1:9/x.git 2>&1); case $out in *connect*) exit 0;; esac; echo "$out"; exit 1`},
		}},
		{"redis", func() ([]byte, mkimg.Options) { return redisImageOptions(t) }, [][]string{
			{"/usr/bin/redis-server", "--version"},
		}},
	} {
		t.Run(img.name, func(t *testing.T) {
			binary, opts := img.build()
			m, err := mkimg.New(binary, opts)
			if err != nil {
				t.Fatal(err)
			}
			layer, err := m.Fetch(context.Background(), m.Layer)
			if err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			cmd := exec.Command("tar", "-x", "-C", root)
			cmd.Stdin = layer
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("tar -x: %v: %s", err, out)
			}
			layer.Close()
			if err := os.MkdirAll(filepath.Join(root, "tmp", "r"), 0o1777); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, dev := range []struct{ name, minor string }{{"null", "3"}, {"zero", "5"}, {"random", "8"}, {"urandom", "9"}} {
				// What a container runtime gives every container.
				if out, err := exec.Command("mknod", "-m", "666", filepath.Join(root, "dev", dev.name), "c", "1", dev.minor).CombinedOutput(); err != nil {
					t.Fatalf("mknod /dev/%s: %v: %s", dev.name, err, out)
				}
			}
			t.Logf("%s: layer %d MB", img.name, m.Layer.Size>>20)
			for _, args := range img.run {
				cmd := exec.Command("chroot", append([]string{root}, args...)...)
				cmd.Env = append(opts.Env, "HOME=/tmp")
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
					continue
				}
				if strings.Contains(string(out), "remote helper") {
					t.Errorf("%s: %s", strings.Join(args, " "), out)
				}
				t.Logf("%s: %s", strings.Join(args, " "), strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]))
			}
		})
	}
}

// TestArgoCDManifests checks the adaptation of install.yaml with no
// cluster: every container runs one of the two images the package
// carries, Dex and the notifications controller are gone, the Services
// have their fixed addresses and argocd-cmd-params-cm names them.
func TestArgoCDManifests(t *testing.T) {
	cache := argoCache(t)
	path := filepath.Join(t.TempDir(), "argocd.yaml")
	writeFile(t, path, argoManifests(t, cache))
	kinds := map[string]int{}
	for _, o := range decodeObjects(t, path) {
		kinds[o.GetKind()]++
		name := o.GetName()
		if strings.Contains(name, "dex") && o.GetKind() != "ClusterRole" {
			t.Errorf("%s %s left in", o.GetKind(), name)
		}
		switch o.GetKind() {
		case "Deployment", "StatefulSet":
			for _, field := range []string{"initContainers", "containers"} {
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
				for _, c := range cs {
					if img := c.(map[string]any)["image"]; img != argoImage && img != argoRedis {
						t.Errorf("%s %s: %s runs %v, not carried", o.GetKind(), name, field, img)
					}
				}
			}
		case "Service":
			ip, _, _ := unstructured.NestedString(o.Object, "spec", "clusterIP")
			if want := map[string]string{"argocd-redis": argoRedisIP, "argocd-repo-server": argoRepoIP, "argocd-server": argoServerIP}[name]; want != "" && ip != want {
				t.Errorf("Service %s: clusterIP %q, want %s", name, ip, want)
			}
		case "ConfigMap":
			if name == "argocd-cmd-params-cm" {
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				if data["redis.server"] != argoRedisIP+":6379" || data["repo.server"] != argoRepoIP+":8081" || data["server.insecure"] != "true" {
					t.Errorf("argocd-cmd-params-cm: %v", data)
				}
			}
		}
	}
	if kinds["CustomResourceDefinition"] != 3 || kinds["Deployment"] != 4 || kinds["StatefulSet"] != 1 {
		t.Errorf("kinds %v: want 3 CRDs, 4 Deployments (server, repo server, Redis, ApplicationSet controller), the controller's StatefulSet", kinds)
	}
	t.Logf("objects by kind: %v", kinds)
}
