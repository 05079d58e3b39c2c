package cli

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
)

// FullPackage is the Go package the full binary is built from: the build
// information of a ferry-full names it.
const FullPackage = "github.com/ferrypkg/ferry/cmd/ferry"

// StampPrefix starts the Go build ID that `make build` links into both
// binaries (-ldflags -buildid=ferry:VERSION:COMMIT:BUILD), the link-time
// variables again: with -trimpath the go command leaves -ldflags out of the
// build information, so the -X values can be read back from the file only
// from there. (A -trimpath build given -X values without the stamp reads
// as a build without them, and so as another build than its own front.)
const StampPrefix = "ferry:"

// ErrNotFerry is returned by ReadVersion for a file that is not a ferry
// binary.
var ErrNotFerry = errors.New("not a ferry binary")

// ReadVersion reads the version of the ferry binary at path from the file,
// without running it: the Go build information (Go version, platform,
// VCS stamp) and the link-time version, commit and build, from the -ldflags
// the build information records or else from the build ID's stamp. It reads
// only the file's headers and build information; a file that is not a
// regular file, not a Go program or not built from pkg (FullPackage for
// ferry-full) is refused with ErrNotFerry.
func ReadVersion(path, pkg string) (VersionInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return VersionInfo{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return VersionInfo{}, err
	} else if !fi.Mode().IsRegular() {
		return VersionInfo{}, fmt.Errorf("%w: not a regular file", ErrNotFerry)
	}
	bi, err := buildinfo.Read(f)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("%w: not a Go program (%v)", ErrNotFerry, err)
	}
	if bi.Path != pkg {
		return VersionInfo{}, fmt.Errorf("%w: a Go program built from %s", ErrNotFerry, bi.Path)
	}
	x := ldflagsX(bi)
	if stamp, ok := strings.CutPrefix(goBuildID(f), StampPrefix); ok {
		x = parseStamp(stamp)
	}
	v := versionOf(bi, x)
	v.GoVersion = bi.GoVersion
	var goos, goarch string
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	v.Platform = goos + "/" + goarch
	return v, nil
}

// linkVars are the link-time variables (version, commit, build).
type linkVars struct{ version, commit, build string }

// versionOf is the version a binary with build information bi (nil if
// none) and link-time variables x reports: the VCS stamp where there is one,
// x.version over the module's version.
func versionOf(bi *debug.BuildInfo, x linkVars) VersionInfo {
	v := VersionInfo{Version: "(devel)", Commit: x.commit, Build: x.build}
	if bi != nil {
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
	if x.version != "" {
		v.Version = x.version
	}
	return v
}

// versionPkg is the package of the link-time variables.
const versionPkg = "github.com/ferrypkg/ferry/cmd/ferry/internal/cli."

// ldflagsX reads the link-time variables from the -ldflags the build
// information records (a build without -trimpath).
func ldflagsX(bi *debug.BuildInfo) linkVars {
	var x linkVars
	for _, s := range bi.Settings {
		if s.Key != "-ldflags" {
			continue
		}
		args := splitQuoted(s.Value)
		for i := 0; i < len(args); i++ {
			a := strings.TrimPrefix(args[i], "-")
			var def string
			switch {
			case a == "X" || a == "-X":
				if i+1 < len(args) {
					i++
					def = args[i]
				}
			case strings.HasPrefix(a, "X="), strings.HasPrefix(a, "-X="):
				_, def, _ = strings.Cut(a, "=")
			}
			name, value, _ := strings.Cut(def, "=")
			switch name {
			case versionPkg + "version":
				x.version = value
			case versionPkg + "commit":
				x.commit = value
			case versionPkg + "build":
				x.build = value
			}
		}
	}
	return x
}

// splitQuoted splits s into fields at spaces, a field quoted with ' or "
// kept whole, as the go command joins flags it records.
func splitQuoted(s string) []string {
	var out []string
	for {
		s = strings.TrimLeft(s, " \t\n")
		if s == "" {
			return out
		}
		if q := s[0]; q == '\'' || q == '"' {
			if end := strings.IndexByte(s[1:], q); end >= 0 {
				out = append(out, s[1:1+end])
				s = s[2+end:]
				continue
			}
		}
		end := strings.IndexAny(s, " \t\n")
		if end < 0 {
			end = len(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
}

// parseStamp splits a build ID stamp, VERSION:COMMIT:BUILD (the version may
// hold ":", the commit and build do not).
func parseStamp(s string) linkVars {
	rest, build, _ := cutLast(s, ":")
	version, commit, _ := cutLast(rest, ":")
	return linkVars{version: version, commit: commit, build: build}
}

func cutLast(s, sep string) (before, after string, ok bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return "", s, false
}

// maxBuildID bounds the Go build ID read from a file.
const maxBuildID = 1 << 10

// goBuildID is the Go build ID of the executable f ("" if it has none that
// can be read): an ELF note, or the start of a Mach-O text section, where
// the Go linker puts it.
func goBuildID(f io.ReaderAt) string {
	if ef, err := elf.NewFile(f); err == nil {
		s := ef.Section(".note.go.buildid")
		if s == nil || s.Size > maxBuildID+16 {
			return ""
		}
		note, err := s.Data()
		if err != nil || len(note) < 16 {
			return ""
		}
		// namesz, descsz, type, then the name "Go\x00\x00" and the ID.
		namesz, descsz := ef.ByteOrder.Uint32(note), ef.ByteOrder.Uint32(note[4:])
		if namesz != 4 || string(note[12:16]) != "Go\x00\x00" || uint64(descsz) > uint64(len(note)-16) {
			return ""
		}
		return string(note[16 : 16+descsz])
	}
	if mf, err := macho.NewFile(f); err == nil {
		s := mf.Section("__text")
		if s == nil {
			return ""
		}
		buf := make([]byte, maxBuildID)
		n, _ := s.ReadAt(buf, 0)
		id, ok := bytes.CutPrefix(buf[:n], []byte("\xff Go build ID: "))
		if !ok {
			return ""
		}
		q, err := strconv.QuotedPrefix(string(id))
		if err != nil {
			return ""
		}
		id2, _ := strconv.Unquote(q)
		return id2
	}
	return ""
}
