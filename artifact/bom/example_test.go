package bom_test

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact/bom"
	"github.com/ferrypkg/ferry/artifact/definition"
)

func ExampleRead() {
	doc := `{"bomFormat":"CycloneDX","specVersion":"1.6","components":[
	  {"type":"library","name":"golang.org/x/net","version":"v0.37.0","purl":"pkg:golang/golang.org/x/net@v0.37.0",
	   "licenses":[{"license":{"id":"BSD-3-Clause"}}]}]}`
	cs, err := bom.Read(strings.NewReader(doc), definition.ArtifactTypeCycloneDX, bom.DefaultLimits)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s %s %s %v\n", cs[0].Type, cs[0].Name, cs[0].Version, cs[0].Licenses)
	// Output: golang golang.org/x/net v0.37.0 [BSD-3-Clause]
}

func ExampleParseQuery() {
	q, err := bom.ParseQuery("pkg:golang/golang.org/x/net@<0.38.0")
	if err != nil {
		panic(err)
	}
	for _, v := range []string{"v0.37.0", "v0.38.0"} {
		c := bom.Component{Name: "golang.org/x/net", Version: v, Type: "golang", PURL: "pkg:golang/golang.org/x/net@" + v}
		fmt.Println(v, q.Match(c))
	}
	// Output:
	// v0.37.0 true
	// v0.38.0 false
}

func ExampleIndex_Query() {
	x := bom.NewIndex()
	x.Add(digest.FromString("sbom of app"), []bom.Component{{Name: "openssl", Version: "3.0.11-1~deb12u2", Type: "deb", PURL: "pkg:deb/debian/openssl@3.0.11-1~deb12u2"}})
	x.Add(digest.FromString("sbom of web"), []bom.Component{{Name: "openssl", Version: "3.0.15-1~deb12u1", Type: "deb", PURL: "pkg:deb/debian/openssl@3.0.15-1~deb12u1"}})
	q, _ := bom.ParseQuery("pkg:deb/debian/openssl@<3.0.15")
	x.Query(q, func(sbom digest.Digest, c bom.Component) bool {
		fmt.Println(sbom == digest.FromString("sbom of app"), c.Version)
		return true
	})
	// Output: true 3.0.11-1~deb12u2
}
