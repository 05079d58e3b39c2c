package advisory_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferrypkg/ferry/artifact/advisory"
	"github.com/ferrypkg/ferry/artifact/bom"
)

func ExampleDB_Match() {
	dir, _ := os.MkdirTemp("", "osv")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "GO-2021-0113.json"), []byte(`{"id":"GO-2021-0113","modified":"2024-01-01T00:00:00Z",
		"affected":[{"package":{"ecosystem":"Go","name":"golang.org/x/text"},
		"ranges":[{"type":"SEMVER","events":[{"introduced":"0"},{"fixed":"0.3.7"}]}]}]}`), 0o644)
	db, err := advisory.LoadDir(dir, advisory.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, v := range []string{"v0.3.6", "v0.3.7"} {
		c := bom.Component{Name: "golang.org/x/text", Version: v, PURL: "pkg:golang/golang.org/x/text@" + v}
		for _, m := range db.Match(c) {
			fmt.Println(m.ID, m.Package, m.Installed, "fixed in", m.Fixed)
		}
	}
	// Output: GO-2021-0113 golang.org/x/text v0.3.6 fixed in 0.3.7
}
