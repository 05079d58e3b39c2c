package rollout

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
// pull secret (podspec.RewriteImages). It is the Helm post-renderer of
// Apply, and Apply passes manifests through it too, so that a workload's own
// spec names the digest: a new package version rolls pods out, and a
// rollback brings the old digests back, whatever the tags say.
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

// document rewrites one YAML document by podspec.RewriteImages; one
// without a pod spec, or whose images need no change, is returned as it is.
func (p *imageRenderer) document(doc []byte) ([]byte, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(doc, &obj); err != nil {
		return nil, fmt.Errorf("parse manifest: %w", err)
	}
	changed, err := podspec.RewriteImages(obj, p.rw.Rewrite, p.pullSecret)
	if err != nil {
		return nil, err
	}
	if !changed {
		return doc, nil
	}
	return yaml.Marshal(obj)
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
