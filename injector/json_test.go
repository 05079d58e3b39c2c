package injector

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// fromStd converts encoding/json's generic value to ours (numbers as text).
func fromStd(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = fromStd(e)
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = fromStd(e)
		}
		return v
	case json.Number:
		return jsonNumber(v)
	}
	return v
}

func checkJSON(t *testing.T, in []byte) {
	got, err := decodeJSON(in)
	var want any
	var werr error
	if !json.Valid(in) {
		werr = errors.New("invalid JSON")
	} else {
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("encoding/json: valid but undecodable %q: %v", in, err)
		}
	}
	if (err == nil) != (werr == nil) {
		t.Fatalf("decodeJSON(%q): err %v, encoding/json err %v", in, err, werr)
	}
	if err == nil && !reflect.DeepEqual(got, fromStd(want)) {
		t.Fatalf("decodeJSON(%q) = %#v, encoding/json = %#v", in, got, want)
	}
	if s, ok := got.(string); ok {
		var back string
		if err := json.Unmarshal(appendJSONString(nil, s), &back); err != nil || back != s {
			t.Fatalf("appendJSONString(%q) does not round-trip: %v", s, err)
		}
	}
}

var jsonSeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+10`, `01`, `1.`, `"a\u00e9\ud83d\ude00\ud800x"`,
	`{"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{},"layers":[]}`,
	`{"a":1,"a":2}`, ` [1, "two", {"3": null}] `, `{"a" 1}`, `[1,]`, `"\x"`, "\"\x01\"", "\"\xff\"",
	`{"manifests":[{"digest":"sha256:00","annotations":{"org.opencontainers.image.ref.name":"v1"}}]}`,
	`[1] x`, `nul`, `"\/"`, `-`, `1e`, `[`, `{"a":`,
}

func TestDecodeJSON(t *testing.T) {
	for _, s := range jsonSeeds {
		checkJSON(t, []byte(s))
	}
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 4096 {
			return
		}
		checkJSON(t, in)
	})
}
