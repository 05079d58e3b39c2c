package definition

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/distribution/reference"
	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/internal/redact"
)

// The sections of a definition, each parsed by defParser (defparser.go).

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$`)
	versionRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$`)
)

func (p *defParser) metadata(n *yaml.Node, field string, md *Metadata) error {
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":        func(v *yaml.Node, f string) error { return p.str(v, f, &md.Name) },
		"version":     func(v *yaml.Node, f string) error { return p.str(v, f, &md.Version) },
		"description": func(v *yaml.Node, f string) error { return p.str(v, f, &md.Description) },
	})
	if err != nil {
		return err
	}
	switch {
	case md.Name == "":
		return p.errf(n.Line, join(field, "name"), "missing")
	case !nameRE.MatchString(md.Name):
		return p.errf(p.lineOf(n, "name"), join(field, "name"), "%.64q is not a valid name (lowercase letters, digits, '-' and '.')", md.Name)
	case md.Version == "":
		return p.errf(n.Line, join(field, "version"), "missing")
	case !versionRE.MatchString(md.Version):
		return p.errf(p.lineOf(n, "version"), join(field, "version"), "%.64q is not a valid version (it must be usable as an OCI tag)", md.Version)
	}
	return nil
}

func (p *defParser) platforms(n *yaml.Node, field string, dst *[]Platform) error {
	seen := map[string]bool{}
	return p.seq(n, field, func(item *yaml.Node, f string) error {
		var s string
		if err := p.str(item, f, &s); err != nil {
			return err
		}
		pl, err := ParsePlatform(s)
		if err != nil {
			return p.errf(item.Line, f, "%v", err)
		}
		if seen[pl.String()] {
			return p.errf(item.Line, f, "duplicate platform %.64q", s)
		}
		seen[pl.String()] = true
		*dst = append(*dst, pl)
		return nil
	})
}

func (p *defParser) component(n *yaml.Node, field string) (Component, error) {
	c := Component{Required: true, Line: n.Line}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":        func(v *yaml.Node, f string) error { return p.str(v, f, &c.Name) },
		"description": func(v *yaml.Node, f string) error { return p.str(v, f, &c.Description) },
		"required":    func(v *yaml.Node, f string) error { return p.boolean(v, f, &c.Required) },
		"findImages":  func(v *yaml.Node, f string) error { return p.boolean(v, f, &c.FindImages) },
		"verify":      func(v *yaml.Node, f string) error { return p.str(v, f, &c.Verify) },
		"images": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				img, err := p.image(item, f)
				c.Images = append(c.Images, img)
				return err
			})
		},
		"charts": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				ch, err := p.chart(item, f)
				c.Charts = append(c.Charts, ch)
				return err
			})
		},
		"manifests": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				m, err := p.manifest(item, f)
				c.Manifests = append(c.Manifests, m)
				return err
			})
		},
		"files": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				fd, err := p.fileDef(item, f)
				c.Files = append(c.Files, fd)
				return err
			})
		},
		"repositories": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				rd, err := p.repository(item, f)
				c.Repositories = append(c.Repositories, rd)
				return err
			})
		},
		"advisories": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				ad := Advisories{Line: item.Line}
				err := p.mapping(item, f, map[string]func(*yaml.Node, string) error{
					"source": func(v *yaml.Node, f string) error { return p.path(v, f, &ad.Source) },
				})
				if err == nil && ad.Source == "" {
					err = p.errf(item.Line, join(f, "source"), "missing")
				}
				c.Advisories = append(c.Advisories, ad)
				return err
			})
		},
	})
	if err != nil {
		return c, err
	}
	if c.Name == "" {
		return c, p.errf(n.Line, join(field, "name"), "missing")
	}
	if !nameRE.MatchString(c.Name) {
		return c, p.errf(p.lineOf(n, "name"), join(field, "name"), "%.64q is not a valid component name (lowercase letters, digits, '-' and '.')", c.Name)
	}
	return c, nil
}

// NormalizeImageRef turns a docker-style reference (nginx:1.27) into its full
// form (docker.io/library/nginx:1.27). A reference without tag or digest
// gets ":latest".
func NormalizeImageRef(s string) (string, error) {
	if s == "" || strings.TrimSpace(s) != s {
		return "", fmt.Errorf("invalid image reference %.80q", s)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return "", fmt.Errorf("invalid image reference %.80q: %w", s, err)
	}
	return reference.TagNameOnly(named).String(), nil
}

func (p *defParser) image(n *yaml.Node, field string) (Image, error) {
	img := Image{Line: n.Line}
	var ref string
	if n.Kind == yaml.ScalarNode {
		if err := p.str(n, field, &ref); err != nil {
			return img, err
		}
	} else {
		err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
			"ref":    func(v *yaml.Node, f string) error { return p.str(v, f, &ref) },
			"layout": func(v *yaml.Node, f string) error { return p.path(v, f, &img.Layout) },
			"tag":    func(v *yaml.Node, f string) error { return p.str(v, f, &img.Tag) },
			"verify": func(v *yaml.Node, f string) error { return p.str(v, f, &img.Verify) },
			"platform": func(v *yaml.Node, f string) error {
				var s string
				if err := p.str(v, f, &s); err != nil {
					return err
				}
				pl, err := ParsePlatform(s)
				if err != nil {
					return p.errf(v.Line, f, "%v", err)
				}
				img.Platform = &pl
				return nil
			},
		})
		if err != nil {
			return img, err
		}
		if ref == "" {
			return img, p.errf(n.Line, join(field, "ref"), "missing")
		}
		if img.Tag != "" && img.Layout == "" {
			return img, p.errf(p.lineOf(n, "tag"), join(field, "tag"), "only valid with layout")
		}
	}
	norm, err := NormalizeImageRef(ref)
	if err != nil {
		return img, p.errf(n.Line, field, "%v", err)
	}
	img.Ref = norm
	if img.Layout != "" && img.Tag == "" {
		named, _ := reference.ParseNormalizedNamed(norm)
		switch r := named.(type) {
		case reference.Digested:
			img.Tag = r.Digest().String()
		case reference.Tagged:
			img.Tag = r.Tag()
		}
	}
	return img, nil
}

func (p *defParser) chart(n *yaml.Node, field string) (Chart, error) {
	ch := Chart{Line: n.Line}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"path":    func(v *yaml.Node, f string) error { return p.path(v, f, &ch.Path) },
		"url":     func(v *yaml.Node, f string) error { return p.str(v, f, &ch.URL) },
		"version": func(v *yaml.Node, f string) error { return p.str(v, f, &ch.Version) },
		"namespace": func(v *yaml.Node, f string) error {
			return p.dnsLabel(v, f, &ch.Namespace)
		},
		"releaseName": func(v *yaml.Node, f string) error {
			return p.dnsLabel(v, f, &ch.ReleaseName)
		},
	})
	if err != nil {
		return ch, err
	}
	switch {
	case ch.Path == "" && ch.URL == "":
		return ch, p.errf(n.Line, field, "needs a path (chart folder or .tgz) or a url (oci://…)")
	case ch.Path != "" && ch.URL != "":
		return ch, p.errf(n.Line, field, "path and url are exclusive")
	case ch.URL != "":
		if !strings.HasPrefix(ch.URL, "oci://") {
			return ch, p.errf(p.lineOf(n, "url"), join(field, "url"), "unsupported chart source %.80q: only oci:// URLs", redact.URL(ch.URL))
		}
		rest := strings.TrimPrefix(ch.URL, "oci://")
		if _, err := reference.ParseNamed(rest); err != nil || strings.ContainsAny(rest, "@") {
			return ch, p.errf(p.lineOf(n, "url"), join(field, "url"), "invalid chart URL %.80q: want oci://host/path/chart", redact.URL(ch.URL))
		}
		if ch.Version == "" {
			return ch, p.errf(n.Line, join(field, "version"), "missing (required with url)")
		}
	case ch.Version != "":
		return ch, p.errf(p.lineOf(n, "version"), join(field, "version"), "only valid with url (a local chart carries its version)")
	}
	return ch, nil
}

// gitURL matches the URL forms git itself clones (besides local paths).
// A query or fragment names no repository (and a token there would end up
// in the package): none is accepted.
var gitURL = regexp.MustCompile(`^((https?|ssh|git)://[^/?#]+/[^?#]*[^/?#]|[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:[^/?#][^?#]*|[A-Za-z0-9.-]+\.[A-Za-z]+:[^/?#][^?#]*)$`)

func (p *defParser) repository(n *yaml.Node, field string) (Repository, error) {
	rd := Repository{Line: n.Line, History: true}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"url":     func(v *yaml.Node, f string) error { return p.str(v, f, &rd.URL) },
		"path":    func(v *yaml.Node, f string) error { return p.path(v, f, &rd.Path) },
		"ref":     func(v *yaml.Node, f string) error { return p.str(v, f, &rd.Ref) },
		"history": func(v *yaml.Node, f string) error { return p.boolean(v, f, &rd.History) },
	})
	if err != nil {
		return rd, err
	}
	switch {
	case rd.URL == "":
		return rd, p.errf(n.Line, join(field, "url"), "missing: the repository's URL is its identity in the cluster (add path to read a local clone)")
	case !gitURL.MatchString(rd.URL):
		return rd, p.errf(p.lineOf(n, "url"), join(field, "url"), "%.80q is not a git URL (https://, http://, ssh://, git:// or user@host:path, without a query or fragment)", redact.URL(rd.URL))
	case strings.ContainsAny(rd.Ref, " \t~^:?*[\\") || strings.Contains(rd.Ref, ".."):
		return rd, p.errf(p.lineOf(n, "ref"), join(field, "ref"), "%.64q is not a branch, tag, ref or commit", rd.Ref)
	}
	u, err := url.Parse(rd.URL)
	if err != nil && strings.Contains(rd.URL, "://") {
		// Not the parser's words: a password holding "/" ends the host
		// early (https://u:p/w@host/…), and they would show its start.
		return rd, p.errf(p.lineOf(n, "url"), join(field, "url"), "%.80q is not a git URL: its host does not parse", redact.URL(rd.URL))
	}
	if err == nil && u.User != nil {
		if _, ok := u.User.Password(); ok {
			return rd, p.errf(p.lineOf(n, "url"), join(field, "url"), "%.80s carries a password: credentials belong to git's credential helpers or ~/.netrc, never to a package", redact.URL(rd.URL))
		}
	}
	return rd, nil
}

func (p *defParser) manifest(n *yaml.Node, field string) (Manifest, error) {
	m := Manifest{Line: n.Line}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"name":      func(v *yaml.Node, f string) error { return p.str(v, f, &m.Name) },
		"namespace": func(v *yaml.Node, f string) error { return p.str(v, f, &m.Namespace) },
		"files": func(v *yaml.Node, f string) error {
			return p.seq(v, f, func(item *yaml.Node, f string) error {
				var s string
				err := p.path(item, f, &s)
				m.Files = append(m.Files, s)
				return err
			})
		},
	})
	if err != nil {
		return m, err
	}
	if m.Name == "" {
		return m, p.errf(n.Line, join(field, "name"), "missing")
	}
	if !nameRE.MatchString(m.Name) {
		return m, p.errf(p.lineOf(n, "name"), join(field, "name"), "%.64q is not a valid name", m.Name)
	}
	if len(m.Files) == 0 {
		return m, p.errf(n.Line, join(field, "files"), "missing")
	}
	return m, nil
}

func (p *defParser) fileDef(n *yaml.Node, field string) (File, error) {
	fd := File{Line: n.Line, Mode: 0o644}
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"source": func(v *yaml.Node, f string) error { return p.path(v, f, &fd.Source) },
		"target": func(v *yaml.Node, f string) error { return p.str(v, f, &fd.Target) },
		"mode": func(v *yaml.Node, f string) error {
			if v.Kind != yaml.ScalarNode {
				return p.errf(v.Line, f, "must be an octal number such as 0644")
			}
			mode, err := strconv.ParseInt(v.Value, 8, 32)
			if err != nil || mode < 0 || mode > 0o777 {
				return p.errf(v.Line, f, "%.64q is not a file mode such as 0644", v.Value)
			}
			fd.Mode = mode
			return nil
		},
	})
	if err != nil {
		return fd, err
	}
	if fd.Source == "" {
		return fd, p.errf(n.Line, join(field, "source"), "missing")
	}
	if fd.Target == "" {
		return fd, p.errf(n.Line, join(field, "target"), "missing")
	}
	// Targets are read a line at a time (docs/packages.md's recipe): no
	// control character, no line end.
	if strings.IndexFunc(fd.Target, unicode.IsControl) >= 0 {
		return fd, p.errf(p.lineOf(n, "target"), join(field, "target"), "invalid target: it holds a control character or a line end")
	}
	return fd, nil
}

// path reads a relative path that must stay inside the definition's folder.
func (p *defParser) path(n *yaml.Node, field string, dst *string) error {
	var s string
	if err := p.str(n, field, &s); err != nil {
		return err
	}
	if err := checkRelPath(s); err != nil {
		return p.errf(n.Line, field, "%v", err)
	}
	*dst = filepath.Clean(filepath.FromSlash(s))
	return nil
}

func checkRelPath(s string) error {
	switch {
	case s == "":
		return errors.New("empty path")
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("invalid path %.64q", s)
	case filepath.IsAbs(s) || strings.HasPrefix(s, "/"):
		return fmt.Errorf("path %.64q must be relative to the definition's folder", s)
	case !filepath.IsLocal(filepath.FromSlash(s)):
		return fmt.Errorf("path %.64q escapes the definition's folder", s)
	}
	return nil
}

// sbom parses the `sbom:` section: enabled (default true) and format.
func (p *defParser) sbom(n *yaml.Node, field string, dst *SBOM) error {
	enabled := true
	var format string
	dst.Line = n.Line
	err := p.mapping(n, field, map[string]func(*yaml.Node, string) error{
		"enabled": func(v *yaml.Node, f string) error { return p.boolean(v, f, &enabled) },
		"format": func(v *yaml.Node, f string) error {
			if err := p.str(v, f, &format); err != nil {
				return err
			}
			sf, err := ParseSBOMFormat(format)
			if err != nil || format == "" {
				return p.errf(v.Line, f, "must be %s or %s, not %.64q", SBOMFormatSPDX, SBOMFormatCycloneDX, format)
			}
			dst.Format = sf
			return nil
		},
	})
	dst.Disabled = !enabled
	return err
}

// sameImage reports whether two normalized references name the same image:
// the same repository, and the same digest when both have one, else the
// same tag.
func SameImage(a, b string) bool {
	if a == b {
		return true
	}
	na, err1 := reference.ParseNormalizedNamed(a)
	nb, err2 := reference.ParseNormalizedNamed(b)
	if err1 != nil || err2 != nil || na.Name() != nb.Name() {
		return false
	}
	da, okA := na.(reference.Digested)
	db, okB := nb.(reference.Digested)
	if okA && okB {
		return da.Digest() == db.Digest()
	}
	ta, okA := na.(reference.Tagged)
	tb, okB := nb.(reference.Tagged)
	return okA && okB && ta.Tag() == tb.Tag()
}
