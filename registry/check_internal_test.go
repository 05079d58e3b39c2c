package registry

import (
	"strings"
	"testing"
)

// TestCheckManifestURLRedacted: a manifest refused for a layer URL does not
// echo the URL's password back (nor into the log).
func TestCheckManifestURLRedacted(t *testing.T) {
	const d = `{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:` + "0000000000000000000000000000000000000000000000000000000000000000" + `","size":1,"urls":["ftp://u:hunter2@h/x"]}`
	err := checkManifest("application/vnd.oci.image.manifest.v1+json", []byte(`{"schemaVersion":2,"layers":[`+d+`]}`))
	if err == nil || !strings.Contains(err.Error(), "is not an http or https URL") || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("%v, want the URL refused without its password", err)
	}
}
