package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version, commit: set at link time when the build has no module version
// or VCS information (-ldflags "-X main.version=v1.2.3 -X main.commit=…");
// build: a digest of the sources built (`make build` sets it, so that two
// builds of one commit with different uncommitted changes differ).
var version, commit, build string

// versionInfo is what `ferry version -o json` prints; its fields are stable.
type versionInfo struct {
	// Version is the module version (v1.2.3, or a pseudo-version), or
	// "(devel)" for a build from a work tree.
	Version string `json:"version"`
	// Commit is the VCS revision the binary was built from, "" if unknown.
	Commit string `json:"commit"`
	// Modified says the work tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goVersion"`
	// Platform is the binary's GOOS/GOARCH.
	Platform string `json:"platform"`
	// Build is the digest of the sources `make build` built, "" if not set.
	Build string `json:"build,omitempty"`
	// Full is the full binary's own version, as the front binary (bin/ferry)
	// found it beside itself; only the front sets it.
	Full *versionInfo `json:"full,omitempty"`
	// FullError says why the front could not tell the full binary's version.
	FullError string `json:"fullError,omitempty"`
}

// currentVersion reads the build information of the running binary.
func currentVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Commit: commit, Build: build, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if version != "" {
		v.Version = version
	}
	return v
}

// identity is what two binaries of one build share: the front hands it to
// the full binary, which refuses to run for a front of another build.
func (v versionInfo) identity() string {
	return fmt.Sprintf("%s %s %t %s %s", v.Version, v.Commit, v.Modified, v.Build, v.GoVersion)
}

// String is the one-line form: "v1.2.3 (commit abc123, go1.26.0, linux/amd64)".
func (v versionInfo) String() string {
	c := v.Commit
	if c == "" {
		c = "unknown"
	}
	if v.Modified {
		c += "+modified"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", v.Version, c, v.GoVersion, v.Platform)
}

func newVersionCmd() *cobra.Command {
	var output outputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print ferry's version, commit and Go version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.validate(); err != nil {
				return err
			}
			v := currentVersion()
			v.Full, v.FullError = fullVersion(cmd.Context())
			if output.json() {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ferry %s\n", v)
			switch {
			case v.Full != nil:
				fmt.Fprintf(cmd.OutOrStdout(), "ferry-full %s\n", v.Full)
			case v.FullError != "":
				fmt.Fprintf(cmd.OutOrStdout(), "ferry-full: %s\n", v.FullError)
			}
			return nil
		},
	}
	output.register(cmd)
	return cmd
}
