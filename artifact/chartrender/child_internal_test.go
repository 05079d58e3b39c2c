package chartrender

import (
	"bytes"
	"encoding/gob"
	"reflect"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
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
	a := answer{Archive: []byte("tgz"), Config: []byte("{}"), Manifests: []artifact.RenderedManifest{
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
