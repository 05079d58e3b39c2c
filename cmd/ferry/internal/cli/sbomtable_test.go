package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/artifact/definition"
)

// TestSBOMTablesQuoteEscapes: what a package or its SBOMs say (image,
// platform, format, component fields) reaches the terminal quoted when it
// holds a control character, never as an escape sequence.
func TestSBOMTablesQuoteEscapes(t *testing.T) {
	const esc = "\x1b]0;PWN\x07\x1b[31m"
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cfg := &artifact.Config{Components: []artifact.Component{{Name: "c", Images: []artifact.Image{{Ref: "img" + esc,
		SBOMs: []artifact.SBOM{{Platform: "linux/amd64" + esc, ArtifactType: "x" + esc}}}}}}}
	if err := printSBOMs(cmd, cfg, false); err != nil {
		t.Fatal(err)
	}
	doc := `{"artifacts":[{"name":"n\u001b[2J","version":"1\u009b31m","type":"t\u202e","purl":"pkg:npm/a\u0007","licenses":["MIT\u001b]8;;http://x\u0007"]}]}`
	docs := []artifact.SBOMDocument{{SBOM: artifact.SBOM{Platform: "linux/arm64" + esc, ArtifactType: definition.ArtifactTypeSyft}, Image: "img" + esc, Data: []byte(doc)}}
	if err := printComponents(cmd, docs, false); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07\u009b\u202e") {
		t.Errorf("escape sequences printed:\n%q", out.String())
	}
}
