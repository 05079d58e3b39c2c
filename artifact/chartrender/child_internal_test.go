package chartrender

import (
	"bytes"
	"context"
	"encoding/gob"
	"reflect"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/chart"
)

// TestValuesCarried: values reach the child as they were given: empty
// lists and maps stay empty (not nil), numbers keep their types.
func TestValuesCarried(t *testing.T) {
	in := map[string]any{
		"list": []any{}, "map": map[string]any{}, "nil": nil, "int": int64(3), "float": 1.5, "bool": true,
		"nested": []any{map[string]any{"a": []any{"x", 2}}},
	}
	v, err := valueOf(in)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	var out *value
	if err := gob.NewDecoder(&buf).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.tree(); !reflect.DeepEqual(got, in) {
		t.Errorf("got %#v, want %#v", got, in)
	}
	if _, err := valueOf(map[string]any{"f": func() {}}); err == nil {
		t.Error("a func carried")
	}
	if (*value)(nil).tree() != nil {
		t.Error("no values are not nil")
	}
}

// TestAnswerEncoding: an answer's bytes come back whole, in place; one cut
// short or with bytes past its end is an error.
func TestAnswerEncoding(t *testing.T) {
	a := answer{Archive: []byte("tgz"), Config: []byte("{}"), Manifests: []build.RenderedManifest{
		{Data: []byte("kind: A\n")}, {Source: "t/hook.yaml", Data: []byte{}, Test: true},
	}}
	msg := a.encode()
	got, err := decodeAnswer(msg)
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("%+v, %v; want %+v", got, err, a)
	}
	for _, bad := range [][]byte{msg[:len(msg)-1], append(msg, 'x'), msg[:4], nil} {
		if _, err := decodeAnswer(bad); err == nil {
			t.Errorf("%d bytes decoded", len(bad))
		}
	}
}

// TestLimitedEndsIdleChild: the kept child is ended once no chart came
// for keepIdle, and the next chart starts another.
func TestLimitedEndsIdleChild(t *testing.T) {
	defer func(d time.Duration) { keepIdle = d }(keepIdle)
	keepIdle = 200 * time.Millisecond
	archive, _, err := chart.Package(chart.Source{Files: []*loader.BufferedFile{
		{Name: "Chart.yaml", Data: []byte("apiVersion: v2\nname: idle\nversion: 1.0.0\n")},
		{Name: "templates/a.yaml", Data: []byte("kind: ConfigMap\n")},
	}}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	l := &Limited{}
	defer l.Close()
	kept := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.proc != nil
	}
	for i := range 2 {
		if _, err := l.RenderChart(context.Background(), archive, build.ChartRelease{Name: "idle"}); err != nil {
			t.Fatal(err)
		}
		if !kept() {
			t.Fatalf("chart %d: no child kept", i)
		}
		deadline := time.Now().Add(5 * time.Second)
		for kept() {
			if time.Now().After(deadline) {
				t.Fatalf("chart %d: the child still runs 5 s after it", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
