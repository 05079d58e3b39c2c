// Package standin plans stand-in images for the images a rendered Helm
// chart names, so that the chart can be installed (every Pod Ready, every
// hook Job complete) in a cluster that cannot pull the real images: each
// stand-in holds e2e/internal/tiny at every path the chart runs and a
// configuration, /standin.json, that tiny's standin mode reads.
//
// Nothing is written for one chart: what each image must do is read from
// the rendered objects. For every container (and every exec probe and
// lifecycle hook) its command line is a role: one that runs once (a Job, a
// hook or test Pod, an init container, an exec command) exits 0; one that
// runs on (Deployments, DaemonSets, StatefulSets, sidecars) listens on the
// ports it declares and those its httpGet and tcpSocket probes name that no
// sibling container declares. A program run from a volume is copied there by
// the init containers that mount it. Webhooks and CRD conversions whose
// Service leads to a container make its certificate name the Service, and
// the stand-in publish it as their caBundle (as the real programs' own
// certificate controllers do). gRPC probes are refused: no chart carried so
// far uses them, and tiny does not answer gRPC.
package standin

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// ConfigPath is where a stand-in image holds its Config.
const ConfigPath = "/standin.json"

// An Image is the plan of one stand-in image.
type Image struct {
	// Ref is the image reference as the chart writes it.
	Ref string
	// Paths are where the program goes besides the image's entrypoint.
	Paths []string
	// NonRoot tells that a container runs the image with runAsNonRoot and
	// no runAsUser: the image must name a non-root user, as the real one
	// does.
	NonRoot bool
	// Config is what tiny reads from ConfigPath.
	Config Config
}

// Config is tiny's standin configuration (e2e/internal/tiny/standin.go).
type Config struct {
	Roles []Role `json:"roles"`
}

// Role is what the image does when run with Argv ("$(NAME)" matching
// anything).
type Role struct {
	Argv      []string      `json:"argv"`
	Exit      bool          `json:"exit,omitempty"`
	Install   []string      `json:"install,omitempty"`
	Listen    []int         `json:"listen,omitempty"`
	DNSNames  []string      `json:"dnsNames,omitempty"`
	CABundles []CABundleRef `json:"caBundles,omitempty"`
}

// CABundleRef names an object whose client configurations towards Service
// (namespace/name) get the stand-in's certificate.
type CABundleRef struct {
	Resource string `json:"resource"`
	Name     string `json:"name"`
	Service  string `json:"service"`
}

func (o Object) String() string {
	if o.Namespace == "" {
		return o.Kind + " " + o.Name
	}
	return o.Kind + " " + o.Namespace + "/" + o.Name
}

// podSpecPaths are where workloads keep their Pod template, by kind.
var podSpecPaths = map[string][]string{
	"Pod":                   {},
	"Deployment":            {"spec", "template"},
	"ReplicaSet":            {"spec", "template"},
	"StatefulSet":           {"spec", "template"},
	"DaemonSet":             {"spec", "template"},
	"ReplicationController": {"spec", "template"},
	"Job":                   {"spec", "template"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template"},
}

// pod is one Pod template of the stream.
type pod struct {
	owner  string // kind/name
	labels map[string]string
	ns     string
	spec   corev1.PodSpec
	once   bool // runs to completion
	roles  map[string]*role
}

// role is a container's command line and what it needs, with the image it
// is of.
type role struct {
	image     string
	container corev1.Container // the one it runs in
	Role
}

// Plan reads the rendered stream (objects without a namespace are in ns)
// and plans a stand-in for each image it names. entrypoint is the stand-in
// images' entrypoint: the command line of a container that gives no
// command starts with it.
func Plan(stream []byte, ns, entrypoint string) (map[string]*Image, error) {
	docs, err := decode(stream)
	if err != nil {
		return nil, err
	}
	var pods []*pod
	type service struct {
		ns, name string
		selector map[string]string
		ports    []corev1.ServicePort
	}
	services := map[string]service{}
	type hookRef struct {
		CABundleRef
		port int32
	}
	var hooks []hookRef
	for _, d := range docs {
		kind, name := str(d, "kind"), str(d, "metadata", "name")
		objNS := str(d, "metadata", "namespace")
		if objNS == "" {
			objNS = ns
		}
		switch kind {
		case "Service":
			var spec corev1.ServiceSpec
			if err := convert(dig(d, "spec"), &spec); err != nil {
				return nil, fmt.Errorf("Service %s: %w", name, err)
			}
			services[objNS+"/"+name] = service{objNS, name, spec.Selector, spec.Ports}
			continue
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			list, _ := dig(d, "webhooks").([]any)
			for _, h := range list {
				var cc struct {
					Service *struct {
						Namespace, Name string
						Port            *int32
					}
				}
				if err := convert(dig(h, "clientConfig"), &cc); err != nil || cc.Service == nil {
					continue
				}
				port := int32(443)
				if cc.Service.Port != nil {
					port = *cc.Service.Port
				}
				hooks = append(hooks, hookRef{CABundleRef{strings.ToLower(kind) + "s", name, cc.Service.Namespace + "/" + cc.Service.Name}, port})
			}
			continue
		case "CustomResourceDefinition":
			var cc struct {
				Service *struct {
					Namespace, Name string
					Port            *int32
				}
			}
			if err := convert(dig(d, "spec", "conversion", "webhook", "clientConfig"), &cc); err == nil && cc.Service != nil {
				port := int32(443)
				if cc.Service.Port != nil {
					port = *cc.Service.Port
				}
				hooks = append(hooks, hookRef{CABundleRef{"customresourcedefinitions", name, cc.Service.Namespace + "/" + cc.Service.Name}, port})
			}
			continue
		}
		p, ok := podSpecPaths[kind]
		if !ok {
			continue
		}
		tmpl := dig(d, p...)
		pd := &pod{owner: kind + "/" + name, ns: objNS, roles: map[string]*role{}}
		if err := convert(dig(tmpl, "spec"), &pd.spec); err != nil {
			return nil, fmt.Errorf("%s: %w", pd.owner, err)
		}
		_ = convert(dig(tmpl, "metadata", "labels"), &pd.labels)
		rp := pd.spec.RestartPolicy
		pd.once = kind == "Job" || kind == "CronJob" || kind == "Pod" && rp != "" && rp != corev1.RestartPolicyAlways
		pods = append(pods, pd)
	}

	images := map[string]*Image{}
	for _, pd := range pods {
		if err := pd.plan(entrypoint, images); err != nil {
			return nil, fmt.Errorf("%s: %w", pd.owner, err)
		}
	}
	// Webhooks: the Service's target port leads to a container.
	for _, h := range hooks {
		svcNS, svcName, _ := strings.Cut(h.Service, "/")
		svc, ok := services[h.Service]
		if !ok {
			return nil, fmt.Errorf("%s %s: no Service %s in the chart", h.Resource, h.Name, h.Service)
		}
		var target intstr.IntOrString
		for _, sp := range svc.ports {
			if sp.Port == h.port {
				target = sp.TargetPort
				if target.IntVal == 0 && target.StrVal == "" {
					target = intstr.FromInt32(sp.Port)
				}
			}
		}
		if target.IntVal == 0 && target.StrVal == "" {
			return nil, fmt.Errorf("%s %s: Service %s has no port %d", h.Resource, h.Name, h.Service, h.port)
		}
		found := false
		for _, pd := range pods {
			if pd.ns != svcNS || len(svc.selector) == 0 || !labels.SelectorFromSet(svc.selector).Matches(labels.Set(pd.labels)) {
				continue
			}
			for _, c := range pd.spec.Containers {
				port, ok := containerPort(c, target)
				if !ok {
					continue
				}
				r := pd.roles[c.Name]
				r.Listen = appendNew(r.Listen, int(port))
				for _, n := range []string{svcName + "." + svcNS + ".svc", svcName + "." + svcNS + ".svc.cluster.local"} {
					r.DNSNames = appendNew(r.DNSNames, n)
				}
				r.CABundles = appendNew(r.CABundles, h.CABundleRef)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("%s %s: no container of the chart serves Service %s port %d", h.Resource, h.Name, h.Service, h.port)
		}
	}
	// Roles with one command line in one image are one role.
	for _, pd := range pods {
		for _, r := range pd.roles {
			img := images[r.image]
			if err := img.add(r.Role); err != nil {
				return nil, fmt.Errorf("%s: image %s: %w", pd.owner, r.image, err)
			}
		}
	}
	for _, img := range images {
		slices.Sort(img.Paths)
		img.Paths = slices.Compact(img.Paths)
		for i := range img.Config.Roles {
			r := &img.Config.Roles[i]
			slices.Sort(r.Listen)
			slices.Sort(r.Install)
			slices.Sort(r.DNSNames)
			slices.SortFunc(r.CABundles, func(a, b CABundleRef) int {
				return strings.Compare(a.Resource+"/"+a.Name+"/"+a.Service, b.Resource+"/"+b.Name+"/"+b.Service)
			})
		}
		slices.SortFunc(img.Config.Roles, func(a, b Role) int { return slices.Compare(a.Argv, b.Argv) })
	}
	return images, nil
}

// add merges r into the image's roles.
func (img *Image) add(r Role) error {
	for i := range img.Config.Roles {
		cur := &img.Config.Roles[i]
		if !slices.Equal(cur.Argv, r.Argv) {
			continue
		}
		if cur.Exit != r.Exit {
			return fmt.Errorf("%q both runs once and runs on", r.Argv)
		}
		for _, p := range r.Listen {
			cur.Listen = appendNew(cur.Listen, p)
		}
		for _, p := range r.Install {
			cur.Install = appendNew(cur.Install, p)
		}
		for _, n := range r.DNSNames {
			cur.DNSNames = appendNew(cur.DNSNames, n)
		}
		for _, c := range r.CABundles {
			cur.CABundles = appendNew(cur.CABundles, c)
		}
		return nil
	}
	img.Config.Roles = append(img.Config.Roles, r)
	return nil
}

// plan gives each container of the pod its role, and the images the paths
// they run.
func (pd *pod) plan(entrypoint string, images map[string]*Image) error {
	type entry struct {
		c    corev1.Container
		init bool
	}
	var all []entry
	for _, c := range pd.spec.InitContainers {
		all = append(all, entry{c, true})
	}
	for _, c := range pd.spec.Containers {
		all = append(all, entry{c, false})
	}
	// Ports some container declares: a probe of another container on one of
	// them is served by that one.
	declared := map[int32]string{}
	for _, e := range all {
		for _, p := range e.c.Ports {
			if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
				declared[p.ContainerPort] = e.c.Name
			}
		}
	}
	var extra []*role // exec probes and lifecycle hooks
	for _, e := range all {
		c := e.c
		if c.Image == "" {
			return fmt.Errorf("container %s: no image", c.Name)
		}
		if images[c.Image] == nil {
			images[c.Image] = &Image{Ref: c.Image}
		}
		if nonRoot, user := pd.runAs(c); nonRoot && user == nil {
			images[c.Image].NonRoot = true
		}
		argv := slices.Clone(c.Command)
		if len(argv) == 0 {
			argv = []string{entrypoint}
		}
		argv = append(argv, c.Args...)
		sidecar := e.init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		r := &role{image: c.Image, container: c, Role: Role{Argv: argv, Exit: pd.once || e.init && !sidecar}}
		pd.roles[c.Name] = r
		if !r.Exit {
			for _, p := range c.Ports {
				if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
					r.Listen = appendNew(r.Listen, int(p.ContainerPort))
				}
			}
		}
		for what, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if pr == nil {
				continue
			}
			var port intstr.IntOrString
			switch {
			case pr.GRPC != nil:
				return fmt.Errorf("container %s: %s probe: gRPC probes are not stood in for", c.Name, what)
			case pr.Exec != nil:
				extra = append(extra, &role{image: c.Image, container: c, Role: Role{Argv: pr.Exec.Command, Exit: true}})
				continue
			case pr.HTTPGet != nil:
				port = pr.HTTPGet.Port
			case pr.TCPSocket != nil:
				port = pr.TCPSocket.Port
			default:
				continue
			}
			n, ok := containerPort(c, port)
			if !ok {
				return fmt.Errorf("container %s: %s probe: no port %s", c.Name, what, port.String())
			}
			if owner, ok := declared[n]; (!ok || owner == c.Name) && !r.Exit {
				r.Listen = appendNew(r.Listen, int(n))
			}
		}
		if lc := c.Lifecycle; lc != nil {
			for _, h := range []*corev1.LifecycleHandler{lc.PostStart, lc.PreStop} {
				if h != nil && h.Exec != nil {
					extra = append(extra, &role{image: c.Image, container: c, Role: Role{Argv: h.Exec.Command, Exit: true}})
				}
			}
		}
	}
	for i, r := range extra {
		pd.roles[fmt.Sprintf("\x00exec%d", i)] = r
	}
	// Where each command line's program must be.
	for _, name := range slices.Sorted(maps.Keys(pd.roles)) {
		r := pd.roles[name]
		if len(r.Argv) == 0 {
			return fmt.Errorf("container %s: an empty exec command", r.container.Name)
		}
		if err := pd.place(r.container, r.Argv[0], entrypoint, images[r.image]); err != nil {
			return err
		}
	}
	return nil
}

// runAs is the container's runAsNonRoot and runAsUser, its own or else
// the pod's.
func (pd *pod) runAs(c corev1.Container) (bool, *int64) {
	var nonRoot *bool
	var user *int64
	if sc := pd.spec.SecurityContext; sc != nil {
		nonRoot, user = sc.RunAsNonRoot, sc.RunAsUser
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.RunAsUser != nil {
			user = sc.RunAsUser
		}
	}
	return nonRoot != nil && *nonRoot, user
}

// place puts the program at p for container c: in the image, or, under a
// volume c mounts, copied there by the init containers that mount it.
func (pd *pod) place(c corev1.Container, p, entrypoint string, img *Image) error {
	if p == entrypoint {
		return nil
	}
	if !strings.HasPrefix(p, "/") {
		img.Paths = append(img.Paths, "/usr/bin/"+p) // on the runtime's default PATH
		return nil
	}
	p = path.Clean(p)
	for _, m := range c.VolumeMounts {
		rel, ok := under(p, m.MountPath)
		if !ok {
			continue
		}
		provided := false
		for _, ic := range pd.spec.InitContainers {
			for _, im := range ic.VolumeMounts {
				if im.Name == m.Name && ic.Name != c.Name {
					r := pd.roles[ic.Name]
					r.Install = appendNew(r.Install, path.Join(im.MountPath, rel))
					provided = true
				}
			}
		}
		if !provided && !slices.ContainsFunc(pd.spec.InitContainers, func(ic corev1.Container) bool { return ic.Name == c.Name }) {
			return fmt.Errorf("container %s runs %s from volume %s, which no init container fills", c.Name, p, m.Name)
		}
		return nil
	}
	img.Paths = append(img.Paths, p)
	return nil
}

// under tells whether p is inside folder dir, and where.
func under(p, dir string) (string, bool) {
	dir = path.Clean(dir)
	if dir == "/" {
		return strings.TrimPrefix(p, "/"), true
	}
	rel, ok := strings.CutPrefix(p, dir+"/")
	return rel, ok
}

// containerPort resolves a port by number or by the name c gives it.
func containerPort(c corev1.Container, port intstr.IntOrString) (int32, bool) {
	if port.Type == intstr.Int {
		return port.IntVal, port.IntVal > 0
	}
	if n, err := strconv.Atoi(port.StrVal); err == nil {
		return int32(n), n > 0
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func appendNew[T comparable](s []T, v T) []T {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// convert decodes a generic value into a typed one through JSON.
func convert(v, out any) error {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Refs are the image references of plans, sorted.
func Refs(plans map[string]*Image) []string {
	return slices.Sorted(maps.Keys(plans))
}
