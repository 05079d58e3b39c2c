package zarf

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
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
	nearest := map[string]string{
		"onCreate": "none in ferry.yaml: run it before `ferry package create` (a Makefile or CI step)",
		"onDeploy": "none: ferry deploy runs no commands; in the cluster, a Helm hook Job or a Job in the component's manifests",
		"onRemove": "none: ferry remove runs no commands; a Helm pre-delete hook Job in a chart",
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
				near := nearest[op]
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
