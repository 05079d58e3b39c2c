package chartrender

import (
	"bytes"
	"encoding/gob"
	"fmt"
	"io"
	"time"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/chart"
	"github.com/ferrypkg/ferry/internal/childproc"
)

// ChildArg is the argument that makes a program the child of a Limited:
// ferry-full's main, and the TestMain of a test that uses a Limited, call
// ServeChild when their first argument is ChildArg.
const ChildArg = "__render-chart"

// ServeChild is the child of a Limited: it answers the requests read from
// r on w, one at a time, until r ends. Nothing else may write to w (the
// caller points os.Stdout elsewhere).
func ServeChild(r io.Reader, w io.Writer) error {
	for {
		msg, err := childproc.ReadMessage(r, 0)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("chart renderer: read a request: %w", err)
		}
		var req request
		if err := gob.NewDecoder(bytes.NewReader(msg)).Decode(&req); err != nil {
			return fmt.Errorf("chart renderer: read a request: %w", err)
		}
		msg = nil
		var out bytes.Buffer
		if err := gob.NewEncoder(&out).Encode(answerOf(req)); err != nil {
			return fmt.Errorf("chart renderer: write an answer: %w", err)
		}
		if err := childproc.WriteMessage(w, out.Bytes()); err != nil {
			return fmt.Errorf("chart renderer: write an answer: %w", err)
		}
		out = bytes.Buffer{}
	}
}

// request is one job for the child: package a chart (Package set), render
// it as `helm template` does (Render), or render a release of it against a
// cluster (Release).
type request struct {
	Package *packageRequest
	Render  *renderRequest
	Release *releaseRequest
	// Output bounds what a rendering returns.
	Output int64
}

type packageRequest struct {
	Source chart.Source
	MTime  time.Time
}

type renderRequest struct {
	Archive                      []byte
	Name, Namespace, KubeVersion string
	Values                       *value
}

type releaseRequest struct {
	Archive         []byte
	Cluster         Cluster
	Name, Namespace string
	Values          *value
	Upgrade         bool
}

// answer is the child's answer to a request: what was asked, or why not.
type answer struct {
	Archive, Config []byte
	Manifests       []artifact.RenderedManifest
	// Err is Helm's error, one line; OverOutput says the rendering was
	// more than the request's Output.
	Err        string
	OverOutput bool
}

func answerOf(req request) (a answer) {
	var err error
	switch {
	case req.Package != nil:
		a.Archive, a.Config, err = chart.Package(req.Package.Source, req.Package.MTime)
	case req.Render != nil:
		r := req.Render
		a.Manifests, err = render(r.Archive, artifact.ChartRelease{Name: r.Name, Namespace: r.Namespace, KubeVersion: r.KubeVersion, Values: r.Values.tree()})
	case req.Release != nil:
		if a.OverOutput, err = renderRelease(req.Release, req.Output); a.OverOutput {
			return answer{OverOutput: true}
		}
	default:
		err = fmt.Errorf("an empty request")
	}
	if err != nil {
		return answer{Err: oneLine(err).Error()}
	}
	var n int64
	for _, m := range a.Manifests {
		n += int64(len(m.Data))
	}
	if n > req.Output {
		return answer{OverOutput: true}
	}
	return a
}

// value carries chart values through gob exactly: gob alone would give
// an empty list back as nil (`toYaml` writes `null`, not `[]`), and needs
// every map and list type registered.
type value struct {
	Scalar any // nil, a bool, a string or a number
	List   []*value
	Map    map[string]*value
	IsList bool
	IsMap  bool
}

// valueOf is v as a value; an element of a type values cannot hold is an
// error.
func valueOf(v any) (*value, error) {
	switch v := v.(type) {
	case nil, bool, string, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return &value{Scalar: v}, nil
	case []any:
		out := &value{IsList: true, List: make([]*value, len(v))}
		for i, e := range v {
			var err error
			if out.List[i], err = valueOf(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := &value{IsMap: true, Map: make(map[string]*value, len(v))}
		for k, e := range v {
			var err error
			if out.Map[k], err = valueOf(e); err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("a value of type %T", v)
}

// tree is the values v carries: a map, for the values of a chart (nil for
// none).
func (v *value) tree() map[string]any {
	if v == nil {
		return nil
	}
	m, _ := v.any().(map[string]any)
	return m
}

func (v *value) any() any {
	switch {
	case v == nil:
		return nil
	case v.IsList:
		out := make([]any, len(v.List))
		for i, e := range v.List {
			out[i] = e.any()
		}
		return out
	case v.IsMap:
		out := make(map[string]any, len(v.Map))
		for k, e := range v.Map {
			out[k] = e.any()
		}
		return out
	}
	return v.Scalar
}
