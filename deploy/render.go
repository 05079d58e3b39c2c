package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ferrypkg/ferry/deploy/agent"
	"github.com/ferrypkg/ferry/internal/podspec"
)

// imageRenderer rewrites the images of the workloads in a YAML stream to
// the in-cluster registry by digest, and gives their pods the registry's
// pull secret. It is the Helm post-renderer of deploy, and deploy passes
// manifests through it too, so that a workload's own spec names the
// digest: a new package version rolls pods out, and a rollback brings the
// old digests back, whatever the tags say.
type imageRenderer struct {
	rw         *agent.Rewriter
	pullSecret string
}

// Run implements Helm's postrender.PostRenderer.
func (p *imageRenderer) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	docs, err := splitYAML(in.Bytes())
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, doc := range docs {
		doc, err = p.document(doc)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(doc)
		if !bytes.HasSuffix(doc, []byte("\n")) {
			out.WriteByte('\n')
		}
	}
	return &out, nil
}

// document rewrites one YAML document; one without a pod spec, or whose
// images need no change, is returned as it is.
func (p *imageRenderer) document(doc []byte) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	spec := podspec.Of(obj)
	if spec == nil {
		return doc, nil
	}
	kind, _ := obj["kind"].(string)
	name := kind
	if md, ok := obj["metadata"].(map[string]any); ok {
		name = fmt.Sprintf("%s %v", kind, md["name"])
	}
	changed := false
	for _, c := range podspec.Containers(spec) {
		image := c.Image()
		if image == "" {
			continue
		}
		n, err := p.rw.Rewrite(image)
		if err != nil {
			return nil, fmt.Errorf("%s: %s[%d]: %w", name, c.Field, c.Index, err)
		}
		if n != image {
			c.Map["image"], changed = n, true
		}
	}
	if !changed {
		return doc, nil
	}
	if p.pullSecret != "" && !hasPullSecret(spec, p.pullSecret) {
		secrets, _ := spec["imagePullSecrets"].([]any)
		spec["imagePullSecrets"] = append(secrets, map[string]any{"name": p.pullSecret})
	}
	return yaml.Marshal(obj)
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

// splitYAML splits a multi-document YAML stream, dropping empty documents.
func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split manifests: %w", err)
		}
		for bytes.HasPrefix(doc, []byte("---\n")) {
			doc = doc[4:]
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

// stripComments drops comment lines, so a document of only comments (Helm
// writes "# Source: …" before each) counts as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}
