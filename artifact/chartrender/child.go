package chartrender

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/ferrypkg/ferry/artifact/build"
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
		bulk := make([][]byte, req.Bulk)
		for i := range bulk {
			if bulk[i], err = childproc.ReadMessage(r, 0); err != nil {
				return fmt.Errorf("chart renderer: read a request: %w", err)
			}
		}
		answer := answerOf(req, bulk)
		bulk = nil
		if err := childproc.WriteMessage(w, answer.encode()); err != nil {
			return fmt.Errorf("chart renderer: write an answer: %w", err)
		}
	}
}

// request is one job for the child: package a chart (Package set), render
// it as `helm template` does (Render), or render a release of it against a
// cluster (Release). Its bytes — a chart's files or archive — travel apart
// from it, as Bulk messages after it, so that neither side copies them.
type request struct {
	Package *packageRequest
	Render  *renderRequest
	Release *releaseRequest
	// Output bounds what a rendering returns.
	Output int64
	// Bulk is how many messages of bytes follow the request.
	Bulk int
}

// packageRequest asks for chart.Package of a folder's files, named here,
// their bytes the bulk in order; or, if Archive, of the archive that is the
// bulk's one message.
type packageRequest struct {
	Names   []string
	Archive bool
	MTime   time.Time
}

// renderRequest asks for a rendering of the chart archive that is the
// bulk's one message.
type renderRequest struct {
	Name, Namespace, KubeVersion string
	Values                       *value
}

// releaseRequest asks for a release's rendering against a cluster, of the
// chart archive that is the bulk's one message.
type releaseRequest struct {
	Cluster         Cluster
	Name, Namespace string
	Values          *value
	Upgrade         bool
}

// answer is the child's answer to a request: what was asked, or why not.
type answer struct {
	Archive, Config []byte
	Manifests       []build.RenderedManifest
	// Err is Helm's error, one line; OverOutput says the rendering was
	// more than the request's Output.
	Err        string
	OverOutput bool
}

func answerOf(req request, bulk [][]byte) (a answer) {
	var err error
	switch {
	case req.Package != nil && req.Package.Archive && len(bulk) == 1:
		a.Archive, a.Config, err = chart.Package(chart.Source{Archive: bulk[0]}, req.Package.MTime)
	case req.Package != nil && len(bulk) == len(req.Package.Names):
		files := make([]*loader.BufferedFile, len(bulk))
		for i, data := range bulk {
			files[i] = &loader.BufferedFile{Name: req.Package.Names[i], Data: data}
		}
		a.Archive, a.Config, err = chart.Package(chart.Source{Files: files}, req.Package.MTime)
	case req.Render != nil && len(bulk) == 1:
		r := req.Render
		a.Manifests, err = render(bulk[0], build.ChartRelease{Name: r.Name, Namespace: r.Namespace, KubeVersion: r.KubeVersion, Values: r.Values.tree()})
	case req.Release != nil && len(bulk) == 1:
		if a.OverOutput, err = renderRelease(bulk[0], req.Release, req.Output); a.OverOutput {
			return answer{OverOutput: true}
		}
	default:
		err = fmt.Errorf("a malformed request")
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

// answerHead is an answer without its bytes, which follow it in its
// message: the archive, the config, then each manifest's data.
type answerHead struct {
	Archive, Config int
	Manifests       []manifestHead
	Err             string
	OverOutput      bool
}

type manifestHead struct {
	Source string
	Test   bool
	Size   int
}

// encode is the answer as one message: its head's length (8 bytes, big
// endian), its head (gob), then its bytes.
func (a answer) encode() []byte {
	head := answerHead{Archive: len(a.Archive), Config: len(a.Config), Err: a.Err, OverOutput: a.OverOutput}
	size := len(a.Archive) + len(a.Config)
	for _, m := range a.Manifests {
		head.Manifests = append(head.Manifests, manifestHead{Source: m.Source, Test: m.Test, Size: len(m.Data)})
		size += len(m.Data)
	}
	var buf bytes.Buffer
	buf.Write(make([]byte, 8))
	if err := gob.NewEncoder(&buf).Encode(head); err != nil {
		return (answer{Err: "chart renderer: " + err.Error()}).encode()
	}
	binary.BigEndian.PutUint64(buf.Bytes()[:8], uint64(buf.Len()-8))
	buf.Grow(size)
	buf.Write(a.Archive)
	buf.Write(a.Config)
	for _, m := range a.Manifests {
		buf.Write(m.Data)
	}
	return buf.Bytes()
}

// decodeAnswer reads an answer encode wrote; its bytes are msg's, not
// copied.
func decodeAnswer(msg []byte) (answer, error) {
	if len(msg) < 8 {
		return answer{}, errors.New("an answer cut short")
	}
	n := binary.BigEndian.Uint64(msg[:8])
	if n > uint64(len(msg)-8) {
		return answer{}, errors.New("an answer cut short")
	}
	var head answerHead
	if err := gob.NewDecoder(bytes.NewReader(msg[8 : 8+n])).Decode(&head); err != nil {
		return answer{}, err
	}
	rest := msg[8+n:]
	take := func(size int) ([]byte, error) {
		if size < 0 || size > len(rest) {
			return nil, errors.New("an answer cut short")
		}
		b := rest[:size:size]
		rest = rest[size:]
		return b, nil
	}
	a := answer{Err: head.Err, OverOutput: head.OverOutput}
	var err error
	if a.Archive, err = take(head.Archive); err != nil {
		return answer{}, err
	}
	if a.Config, err = take(head.Config); err != nil {
		return answer{}, err
	}
	for _, m := range head.Manifests {
		data, err := take(m.Size)
		if err != nil {
			return answer{}, err
		}
		a.Manifests = append(a.Manifests, build.RenderedManifest{Source: m.Source, Test: m.Test, Data: data})
	}
	if len(rest) > 0 {
		return answer{}, errors.New("an answer with bytes past its end")
	}
	return a, nil
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
