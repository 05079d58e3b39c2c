package main

import (
	"strings"
	"testing"
)

// TestBreaches: each rule catches its breach, and a tree that keeps them
// has none.
func TestBreaches(t *testing.T) {
	p := func(rel string, imports ...string) pkg {
		q := pkg{ImportPath: module + "/" + rel}
		for _, i := range imports {
			q.Imports = append(q.Imports, module+"/"+i)
		}
		return q
	}
	named := map[string]bool{"artifact": true, "internal/confine": true, "deploy": true, "cmd/ferry": true, "internal/testsupport/fixture": true, "artifact/zarf/zarftest": true, "e2e": true}
	size := func(n int) func(pkg) (int, error) { return func(pkg) (int, error) { return n, nil } }
	for _, tc := range []struct {
		name string
		pkgs []pkg
		n    int
		want string
	}{
		{"a tree that keeps them", []pkg{p("artifact", "internal/confine"), p("deploy", "artifact"), p("cmd/ferry", "deploy"), p("e2e", "internal/testsupport/fixture", "cmd/ferry"), p("artifact/zarf/zarftest", "internal/testsupport/fixture")}, 10, ""},
		{"an upward arrow", []pkg{p("internal/confine", "artifact")}, 10, "internal/confine imports artifact"},
		{"artifact above deploy", []pkg{p("artifact", "deploy")}, 10, "artifact imports deploy"},
		{"cmd imported", []pkg{p("deploy", "cmd/ferry")}, 10, "deploy imports cmd/ferry"},
		{"test support in production", []pkg{p("deploy", "internal/testsupport/fixture")}, 10, "test support, for tests only"},
		{"a package too large", []pkg{p("deploy")}, MaxPackageLines + 1, "more than 5000"},
		{"artifact past its own bound", []pkg{p("artifact")}, over["artifact"].lines + 1, "more than the"},
		{"a package the map does not name", []pkg{p("deploy/newthing")}, 10, "not in docs/architecture.md's code map"},
		{"an unknown folder", []pkg{p("util")}, 10, "does not place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := breachesOf(tc.pkgs, named, size(tc.n))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("breaches %q, want none", got)
			case tc.want != "" && (len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want)):
				t.Errorf("breaches %q, want one saying %q", got, tc.want)
			}
		})
	}
}
