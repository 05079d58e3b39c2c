package zarf

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// only applies only.flavor and only.cluster.architecture as zarf package
// create does, and reports what has no equivalent.
func (c *converter) only(o *object, name string) (bool, error) {
	if !o.has("only") {
		return true, nil
	}
	oo, err := c.object(o.vals["only"], o.f("only"), "ZarfComponentOnlyTarget")
	if err != nil {
		return false, err
	}
	flavor, err := c.str(oo, "flavor")
	if err != nil {
		return false, err
	}
	if flavor != "" && flavor != c.opts.Flavor && !c.built {
		c.gap(oo.line("flavor"), oo.f("flavor"), fmt.Sprintf("component %s is for flavor %q, not %q", name, flavor, c.opts.Flavor), "left out, as zarf package create leaves it out (convert with --flavor "+flavor+" for that flavor)")
		return false, nil
	}
	if os, _ := c.str(oo, "localOS"); os != "" {
		c.gap(oo.line("localOS"), oo.f("localOS"), fmt.Sprintf("deployed only from a %s machine", os), "none: ferry deploys the same from every machine; leave the component out with --components")
	}
	if oo.has("cluster") {
		co, err := c.object(oo.vals["cluster"], oo.f("cluster"), "ZarfComponentOnlyCluster")
		if err != nil {
			return false, err
		}
		if arch, _ := c.str(co, "architecture"); arch != "" && arch != c.arch && !c.built {
			c.gap(co.line("architecture"), co.f("architecture"), fmt.Sprintf("component %s is for %s, the package for %s", name, arch, c.arch), "left out, as zarf package create leaves it out (convert with --architecture "+arch+" for that architecture)")
			return false, nil
		}
		if !co.isZero("distros") {
			c.gap(co.line("distros"), co.f("distros"), "Kubernetes distributions (reserved by Zarf, unused)", "none")
		}
	}
	return true, nil
}

// actions reports every action: ferry runs no commands.
func (c *converter) actions(n *yaml.Node, field string) error {
	o, err := c.object(n, field, "ZarfComponentActions")
	if err != nil {
		return err
	}
	nearest := func(op, when string) string {
		switch op + "." + when {
		case "onCreate.before":
			return "none in ferry.yaml: run it before `ferry package create` (a Makefile or CI step)"
		case "onCreate.after", "onCreate.onSuccess":
			return "none in ferry.yaml: run it after `ferry package create` succeeds (a Makefile or CI step)"
		case "onCreate.onFailure":
			return "none in ferry.yaml: run it when `ferry package create` fails (a Makefile or CI step)"
		case "onDeploy.before":
			return "none: ferry deploy runs no commands; in the cluster, a Helm pre-install hook Job in a chart"
		case "onDeploy.after", "onDeploy.onSuccess":
			return "none: ferry deploy runs no commands; in the cluster, a Helm post-install hook Job or a Job in the component's manifests"
		case "onRemove.before":
			return "none: ferry remove runs no commands; a Helm pre-delete hook Job in a chart"
		case "onRemove.after", "onRemove.onSuccess":
			return "none: ferry remove runs no commands; a Helm post-delete hook Job in a chart"
		}
		return "none: ferry runs no commands when " + strings.ToLower(strings.TrimPrefix(op, "on")) + " fails; it reports the failure and stops"
	}
	for _, op := range o.order {
		so, err := c.object(o.vals[op], o.f(op), "ZarfComponentActionSet")
		if err != nil {
			return err
		}
		if so.has("defaults") {
			if _, err := c.object(so.vals["defaults"], so.f("defaults"), "ZarfComponentActionDefaults"); err != nil {
				return err
			}
		}
		for _, when := range so.order {
			if when == "defaults" {
				continue
			}
			if err := c.list(so, when, func(item *yaml.Node, f string) error {
				ao, err := c.object(item, f, "ZarfComponentAction")
				if err != nil {
					return err
				}
				what := "action"
				if cmd, _ := c.str(ao, "cmd"); cmd != "" {
					first, _, _ := strings.Cut(strings.TrimSpace(cmd), "\n")
					what = fmt.Sprintf("command %q", first)
				}
				near := nearest(op, when)
				if ao.has("wait") {
					wo, err := c.object(ao.vals["wait"], ao.f("wait"), "ZarfComponentActionWait")
					if err != nil {
						return err
					}
					if wo.has("cluster") {
						wc, err := c.object(wo.vals["cluster"], wo.f("cluster"), "ZarfComponentActionWaitCluster")
						if err != nil {
							return err
						}
						kind, _ := c.str(wc, "kind")
						nm, _ := c.str(wc, "name")
						cond, _ := c.str(wc, "condition")
						what = fmt.Sprintf("wait for %s %s %s", kind, nm, cond)
						if op == "onDeploy" {
							near = "ferry deploy waits until every object of the package's charts and manifests is ready; for another object, a Helm hook Job"
						}
					}
					if wo.has("network") {
						wn, err := c.object(wo.vals["network"], wo.f("network"), "ZarfComponentActionWaitNetwork")
						if err != nil {
							return err
						}
						addr, _ := c.str(wn, "address")
						what = "wait for the network address " + addr
					}
				}
				if ao.has("setVariables") || ao.has("setVariable") {
					what += " that sets variables"
				}
				c.gap(item.Line, f, fmt.Sprintf("%s %s: %s", op, when, what), near)
				return nil
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// rel turns a path of zarf.yaml into one relative to ferry.yaml's folder,
// which it must not leave.
func (c *converter) rel(line int, field, p string) (string, error) {
	abs := p
	if !filepath.IsAbs(p) {
		abs = filepath.Join(c.zdir, p)
	}
	r, err := filepath.Rel(c.odir, abs)
	if err != nil || !filepath.IsLocal(r) {
		return "", c.errf(line, field, "%q is outside the ferry definition's folder %s: ferry definitions name only paths inside their folder; copy it in (or convert with -f into a folder that holds it)", p, c.odir)
	}
	return filepath.ToSlash(r), nil
}

var remoteRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]*://`)

func isURL(s string) bool { return remoteRE.MatchString(s) }

// splitShasum splits Zarf's URL@sha256 form of remote files.
func splitShasum(u string) (string, string) {
	if i := strings.LastIndex(u, "@"); i > 0 && len(u)-i-1 == 64 {
		return u[:i], u[i+1:]
	}
	return u, ""
}

// localPlaceholder is where a remote source is to be put: a path in the
// definition, so that create fails loudly until it is there.
func localPlaceholder(folder, u string) string {
	base := filepath.Base(strings.TrimSuffix(strings.SplitN(u, "?", 2)[0], "/"))
	if base == "." || base == "/" || base == "" {
		base = "download"
	}
	return folder + "/" + base
}

// cosignTag is a reference whose tag is cosign's tag of a signature, an
// attestation or an attached SBOM of the manifest it names:
// REPO:sha256-HEX.sig, .att, .sbom. Zarf lists them as images.
var cosignTag = regexp.MustCompile(`^(.+):sha256-([0-9a-f]{64})\.(sig|att|sbom)$`)

// cosignArtifact is an image entry of a zarf.yaml that is cosign's.
type cosignArtifact struct {
	ref, field string
	line       int
}

// cosignGaps reports the cosign tags of a component's images, which are
// left out of images: ferry's create carries the signatures and
// attestations of each image it fetches by cosign's tags and as
// referrers (artifact/build), and makes SBOMs itself.
func (c *converter) cosignGaps(sigs []cosignArtifact, images []definition.Image) {
	for _, s := range sigs {
		m := cosignTag.FindStringSubmatch(s.ref)
		repo, subject := m[1], repoDigest(m[1], m[2])
		what := map[string]string{"sig": "signature", "att": "attestation", "sbom": "attached SBOM"}[m[3]]
		near := "left out of images: ferry's create carries the cosign signatures and attestations of each image it fetches, found by this tag, beside the image (`ferry package inspect` lists them)"
		if m[3] == "sbom" {
			near = "left out of images: ferry carries no cosign attached SBOM; `ferry package create` makes an SBOM of each image itself"
		}
		if !slices.ContainsFunc(images, func(i definition.Image) bool { return sameRepo(i.Ref, repo) }) {
			near += "; no image of this component is from " + repo + ": add " + subject + " to images to carry it"
		}
		c.gap(s.line, s.field, fmt.Sprintf("cosign's %s of %s (its tag %s), which Zarf carries as an image", what, subject, strings.TrimPrefix(s.ref, repo+":")), near)
	}
}

func repoDigest(repo, hex string) string { return repo + "@sha256:" + hex }

// sameRepo reports whether the image ref is from the repository repo
// (both normalized).
func sameRepo(ref, repo string) bool {
	n, err := definition.NormalizeImageRef(ref)
	if err != nil {
		return false
	}
	if i := strings.Index(n, "@"); i >= 0 {
		n = n[:i]
	}
	if i := strings.LastIndex(n, ":"); i > strings.LastIndex(n, "/") {
		n = n[:i]
	}
	return n == repo
}
