package podspec

import "fmt"

// RewriteImages is the rule by which deploy makes a workload pull from the
// in-cluster registry by digest: it sets the image of every container of
// obj's pod spec to what rewrite returns for it (a container naming no image
// is skipped) and, when one changed and pullSecret is not empty, names
// pullSecret among the pod's imagePullSecrets, once. It reports whether obj
// changed; an object whose kind holds no pod spec is left as it is. An error
// of rewrite comes back naming the object and the container
// ("Deployment web: containers[0]: …").
func RewriteImages(obj map[string]any, rewrite func(image string) (string, error), pullSecret string) (bool, error) {
	spec := Of(obj)
	if spec == nil {
		return false, nil
	}
	kind, _ := obj["kind"].(string)
	name := kind
	if md, ok := obj["metadata"].(map[string]any); ok {
		name = fmt.Sprintf("%s %v", kind, md["name"])
	}
	changed := false
	for _, c := range Containers(spec) {
		image := c.Image()
		if image == "" {
			continue
		}
		n, err := rewrite(image)
		if err != nil {
			return false, fmt.Errorf("%s: %s[%d]: %w", name, c.Field, c.Index, err)
		}
		if n != image {
			c.Map["image"], changed = n, true
		}
	}
	if !changed {
		return false, nil
	}
	if pullSecret != "" && !hasPullSecret(spec, pullSecret) {
		secrets, _ := spec["imagePullSecrets"].([]any)
		spec["imagePullSecrets"] = append(secrets, map[string]any{"name": pullSecret})
	}
	return true, nil
}

func hasPullSecret(spec map[string]any, name string) bool {
	secrets, _ := spec["imagePullSecrets"].([]any)
	for _, s := range secrets {
		if s, ok := s.(map[string]any); ok && s["name"] == name {
			return true
		}
	}
	return false
}
