// Package podspec knows where Kubernetes workloads keep their pod spec and
// its containers, in objects decoded from YAML or JSON (map[string]any) —
// the one table find-images reads images by — and holds the rule deploy
// rewrites them by (RewriteImages: each image to the in-cluster registry's
// reference by digest, and the registry's pull secret named). It imports no
// ferry package, so that package artifact can use it.
package podspec

// paths are where workloads keep their pod spec, by kind.
var paths = map[string][]string{
	"Pod":                   {"spec"},
	"Deployment":            {"spec", "template", "spec"},
	"ReplicaSet":            {"spec", "template", "spec"},
	"StatefulSet":           {"spec", "template", "spec"},
	"DaemonSet":             {"spec", "template", "spec"},
	"Job":                   {"spec", "template", "spec"},
	"ReplicationController": {"spec", "template", "spec"},
	"PodTemplate":           {"template", "spec"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "spec"},
}

// containerFields are a pod spec's lists of containers, in the order the
// kubelet starts them.
var containerFields = []string{"initContainers", "containers", "ephemeralContainers"}

// IsWorkload reports whether objects of kind hold a pod spec.
func IsWorkload(kind string) bool {
	_, ok := paths[kind]
	return ok
}

// Of returns the pod spec of obj, or nil when obj's kind holds none or obj
// has none where its kind keeps it.
func Of(obj map[string]any) map[string]any {
	kind, _ := obj["kind"].(string)
	path, ok := paths[kind]
	if !ok {
		return nil
	}
	spec := obj
	for _, k := range path {
		spec, _ = spec[k].(map[string]any)
	}
	return spec
}

// Container is one container of a pod spec: the list it is in
// (initContainers, containers or ephemeralContainers), its index there,
// and the container itself, which may be changed in place.
type Container struct {
	Field string
	Index int
	Map   map[string]any
}

// Image is the container's image, "" when it names none.
func (c Container) Image() string {
	s, _ := c.Map["image"].(string)
	return s
}

// Containers lists the containers of a pod spec; an entry that is not a
// mapping is left out.
func Containers(spec map[string]any) []Container {
	var out []Container
	for _, field := range containerFields {
		list, _ := spec[field].([]any)
		for i, c := range list {
			if m, ok := c.(map[string]any); ok {
				out = append(out, Container{Field: field, Index: i, Map: m})
			}
		}
	}
	return out
}
