package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version, commit: set at link time when the build has no module version
// or VCS information (-ldflags "-X …/cmd/ferry/internal/cli.version=v1.2.3", see the Makefile);
// build: a digest of the sources built (`make build` sets it, so that two
// builds of one commit with different uncommitted changes differ).
var version, commit, build string

// VersionInfo is what `ferry version -o json` prints; its fields are stable.
type VersionInfo struct {
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
	// read it from the file beside itself (or on PATH), without running it;
	// only the front sets it.
	Full *VersionInfo `json:"full,omitempty"`
	// FullError says why the front would not run the full binary: not
	// found, not ferry, or of another build (Full is then what it is).
	FullError string `json:"fullError,omitempty"`
}

// CurrentVersion reads the build information of the running binary.
func CurrentVersion() VersionInfo {
	bi, _ := debug.ReadBuildInfo()
	v := versionOf(bi, linkVars{version: version, commit: commit, build: build})
	v.GoVersion, v.Platform = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH
	return v
}

// Identity is what two binaries of one build share: the front hands it to
// the full binary, which refuses to run for a front of another build.
func (v VersionInfo) Identity() string {
	return fmt.Sprintf("%s %s %t %s %s", v.Version, v.Commit, v.Modified, v.Build, v.GoVersion)
}

// String is the one-line form: "v1.2.3 (commit abc123, go1.26.0, linux/amd64)".
func (v VersionInfo) String() string {
	c := v.Commit
	if c == "" {
		c = "unknown"
	}
	if v.Modified {
		c += "+modified"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s)", v.Version, c, v.GoVersion, v.Platform)
}

func newVersionCmd(fullVersion func(context.Context) (*VersionInfo, string)) *cobra.Command {
	var output OutputFlag
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print ferry's version, commit and Go version",
		Example: `  ferry version
  ferry version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			v := CurrentVersion()
			if fullVersion != nil {
				v.Full, v.FullError = fullVersion(cmd.Context())
			}
			if output.JSON() {
				return WriteJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ferry %s\n", v)
			switch {
			case v.FullError != "":
				fmt.Fprintf(cmd.OutOrStdout(), "ferry-full: %s\n", v.FullError)
			case v.Full != nil:
				fmt.Fprintf(cmd.OutOrStdout(), "ferry-full %s\n", v.Full)
			}
			return nil
		},
	}
	output.Register(cmd)
	return cmd
}
