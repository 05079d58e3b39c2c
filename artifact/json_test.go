package artifact_test

import (
	"encoding/json"
	"io"
)

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }
func jsonMarshal(v any) ([]byte, error)   { return json.Marshal(v) }
