package bom

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Each format's entries are read one at a time (docReader.entry): one of
// at most smallEntry bytes decoded whole into the format's struct, a
// larger one walked token by token, as the document is: a field Read
// keeps read as a string, every other value skipped, and the entry's
// lists (nested components, licenses, external references) read one
// element at a time, so that one entry holding millions of values costs
// what Read keeps of it, not what it lists.

// SPDX 2.x JSON (https://spdx.github.io/spdx-spec/v2.3/): each package of
// "packages" is a component; files and snippets are not. The package of
// the image itself (Syft's DocumentRoot, purpose CONTAINER) is kept.
var spdxFormat = format{name: "SPDX document", field: func(d *docReader, key string) error {
	switch key {
	case "spdxVersion":
		v, err := d.str(loc{kind: "spdxVersion", i: -1}, "the value")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(v, "SPDX-2.") {
			return fmt.Errorf("version %.40q is not SPDX 2.x", v)
		}
		return nil
	case "packages":
		return d.array("packages", func(i int) error {
			where := loc{kind: "package", i: i}
			var p *spdxPackage
			return d.entry(where, &p, func() error {
				if p == nil {
					return nil
				}
				c := Component{Name: p.Name, Version: p.VersionInfo, Type: strings.ToLower(p.PrimaryPackagePurpose)}
				for _, r := range p.ExternalRefs {
					if r.ReferenceType == "purl" && c.PURL == "" {
						c.PURL = r.ReferenceLocator
					}
				}
				c.Licenses = licenses(nil, p.LicenseDeclared, p.LicenseConcluded)
				return d.add(where, c)
			}, func() error { return d.spdxPackage(where) })
		})
	}
	return d.skip()
}}

type spdxPackage struct {
	Name                  string `json:"name"`
	VersionInfo           string `json:"versionInfo"`
	PrimaryPackagePurpose string `json:"primaryPackagePurpose"`
	LicenseConcluded      string `json:"licenseConcluded"`
	LicenseDeclared       string `json:"licenseDeclared"`
	ExternalRefs          []struct {
		ReferenceType    string `json:"referenceType"`
		ReferenceLocator string `json:"referenceLocator"`
	} `json:"externalRefs"`
}

// spdxPackage walks one SPDX package, as the fast path reads it.
func (d *docReader) spdxPackage(where loc) error {
	var c Component
	var purpose, declared, concluded string
	null, err := d.fields(where, func(key string) (err error) {
		switch key {
		case "name":
			c.Name, err = d.str(where, key)
		case "versionInfo":
			c.Version, err = d.str(where, key)
		case "primaryPackagePurpose":
			purpose, err = d.str(where, key)
		case "licenseDeclared":
			declared, err = d.str(where, key)
		case "licenseConcluded":
			concluded, err = d.str(where, key)
		case "externalRefs":
			err = d.list(where, key, func(int) error {
				var typ, locator string
				_, err := d.fields(where, func(key string) (err error) {
					switch key {
					case "referenceType":
						typ, err = d.str(where, "externalRefs.referenceType")
					case "referenceLocator":
						locator, err = d.str(where, "externalRefs.referenceLocator")
					default:
						err = d.skipValue()
					}
					return err
				})
				if typ == "purl" && c.PURL == "" {
					c.PURL = locator
				}
				return err
			})
		default:
			err = d.skipValue()
		}
		return err
	})
	if err != nil || null {
		return err
	}
	c.Type = strings.ToLower(purpose)
	c.Licenses = licenses(nil, declared, concluded)
	return d.add(where, c)
}

// CycloneDX JSON (https://cyclonedx.org/docs/1.6/json/): the subject
// (metadata.component) and every component, nested ones included, but
// files.
var cycloneDXFormat = format{name: "CycloneDX document", field: func(d *docReader, key string) error {
	switch key {
	case "bomFormat":
		v, err := d.str(loc{kind: "bomFormat", i: -1}, "the value")
		if err != nil {
			return err
		}
		if v != "CycloneDX" {
			return fmt.Errorf("bomFormat %.40q is not CycloneDX", v)
		}
		return nil
	case "metadata":
		return d.object(func(key string) error {
			if key != "component" {
				return d.skip()
			}
			return d.cdxEntry(loc{kind: "metadata.component", i: -1})
		})
	case "components":
		return d.array("components", func(i int) error { return d.cdxEntry(loc{kind: "component", i: i}) })
	}
	return d.skip()
}}

// cdxEntry reads a top-level CycloneDX component and what nests in it.
func (d *docReader) cdxEntry(where loc) error {
	var c *cdxComponent
	return d.entry(where, &c, func() error {
		if c == nil {
			return nil
		}
		return d.addCDX(where, *c, 1)
	}, func() error { return d.cdxComponent(where, 1) })
}

type cdxComponent struct {
	Type       string         `json:"type"`
	Name       string         `json:"name"`
	Group      string         `json:"group"`
	Version    string         `json:"version"`
	PURL       string         `json:"purl"`
	Licenses   []cdxLicense   `json:"licenses"`
	Components []cdxComponent `json:"components"`
}

type cdxLicense struct {
	License *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"license"`
	Expression string `json:"expression"`
}

// addCDX adds c, depth levels deep, and the components nested in it, but
// files.
func (d *docReader) addCDX(where loc, c cdxComponent, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: nested more than %d levels deep", where, maxDepth)
	}
	if c.Type != "file" {
		comp := Component{Name: c.Name, Version: c.Version, Type: c.Type, PURL: c.PURL}
		if c.Group != "" && c.PURL == "" {
			comp.Name = c.Group + "/" + c.Name
		}
		for _, l := range c.Licenses {
			if l.License != nil {
				comp.Licenses = licenses(comp.Licenses, l.License.ID, l.License.Name)
			}
			comp.Licenses = licenses(comp.Licenses, l.Expression)
		}
		if err := d.add(where, comp); err != nil {
			return err
		}
	}
	for i, n := range c.Components {
		if err := d.addCDX(loc{kind: "component", i: i, parent: &where}, n, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// cdxComponent walks a CycloneDX component, depth levels deep, and the
// components nested in it. It comes before them in Read's result: its
// place is taken when it starts, and given back if it is a file.
func (d *docReader) cdxComponent(where loc, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%s: nested more than %d levels deep", where, maxDepth)
	}
	slot, err := d.reserve()
	if err != nil {
		return err
	}
	var c Component
	var typ, group string
	null, err := d.fields(where, func(key string) (err error) {
		switch key {
		case "type":
			typ, err = d.str(where, key)
		case "name":
			c.Name, err = d.str(where, key)
		case "group":
			group, err = d.str(where, key)
		case "version":
			c.Version, err = d.str(where, key)
		case "purl":
			c.PURL, err = d.str(where, key)
		case "licenses":
			err = d.list(where, key, func(int) error {
				_, err := d.fields(where, func(key string) (err error) {
					var l string
					switch key {
					case "license":
						_, err = d.fields(where, func(key string) (err error) {
							if key != "id" && key != "name" {
								return d.skipValue()
							}
							if l, err = d.str(where, "licenses.license."+key); err == nil {
								c.Licenses, err = d.license(where, c.Licenses, l)
							}
							return err
						})
						return err
					case "expression":
						if l, err = d.str(where, "licenses.expression"); err == nil {
							c.Licenses, err = d.license(where, c.Licenses, l)
						}
						return err
					}
					return d.skipValue()
				})
				return err
			})
		case "components":
			err = d.list(where, key, func(i int) error {
				return d.cdxComponent(loc{kind: "component", i: i, parent: &where}, depth+1)
			})
		default:
			err = d.skipValue()
		}
		return err
	})
	if err != nil {
		return err
	}
	if null || typ == "file" {
		d.release(slot)
		return nil
	}
	c.Type = typ
	if group != "" && c.PURL == "" {
		c.Name = group + "/" + c.Name
	}
	return d.set(where, slot, c)
}

// Syft JSON (https://github.com/anchore/syft/tree/main/schema/json): each
// artifact is a component.
var syftFormat = format{name: "Syft document", field: func(d *docReader, key string) error {
	if key != "artifacts" {
		return d.skip()
	}
	return d.array("artifacts", func(i int) error {
		where := loc{kind: "artifact", i: i}
		var a *struct {
			Name     string        `json:"name"`
			Version  string        `json:"version"`
			Type     string        `json:"type"`
			PURL     string        `json:"purl"`
			Licenses []syftLicense `json:"licenses"`
		}
		return d.entry(where, &a, func() error {
			if a == nil {
				return nil
			}
			c := Component{Name: a.Name, Version: a.Version, Type: a.Type, PURL: a.PURL}
			for _, l := range a.Licenses {
				c.Licenses = licenses(c.Licenses, string(l))
			}
			return d.add(where, c)
		}, func() error { return d.syftArtifact(where) })
	})
}}

// syftLicense is a license of a Syft artifact: a string (schemas before
// 9) or an object whose spdxExpression, else value, names it.
type syftLicense string

func (l *syftLicense) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		err := json.Unmarshal(b, &s)
		*l = syftLicense(s)
		return err
	}
	var o struct {
		Value          string `json:"value"`
		SPDXExpression string `json:"spdxExpression"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	*l = syftLicense(o.SPDXExpression)
	if o.SPDXExpression == "" {
		*l = syftLicense(o.Value)
	}
	return nil
}

// syftArtifact walks one Syft artifact, as the fast path reads it. Its licenses are strings (schemas
// before 9) or objects whose spdxExpression, else value, names one.
func (d *docReader) syftArtifact(where loc) error {
	var c Component
	null, err := d.fields(where, func(key string) (err error) {
		switch key {
		case "name":
			c.Name, err = d.str(where, key)
		case "version":
			c.Version, err = d.str(where, key)
		case "type":
			c.Type, err = d.str(where, key)
		case "purl":
			c.PURL, err = d.str(where, key)
		case "licenses":
			err = d.list(where, key, func(int) error {
				t, err := d.dec.Token()
				if err != nil {
					return err
				}
				var l string
				switch t := t.(type) {
				case nil:
					return nil
				case string:
					l = t
				default:
					if t != jsonObject {
						return fmt.Errorf("%s: a license is %s, not a string or an object", where, kindOf(t))
					}
					var value, expr string
					err := d.inObject(func(key string) (err error) {
						switch key {
						case "value":
							value, err = d.str(where, "licenses.value")
						case "spdxExpression":
							expr, err = d.str(where, "licenses.spdxExpression")
						default:
							err = d.skipValue()
						}
						return err
					})
					if err != nil {
						return err
					}
					l = expr
					if l == "" {
						l = value
					}
				}
				c.Licenses, err = d.license(where, c.Licenses, l)
				return err
			})
		default:
			err = d.skipValue()
		}
		return err
	})
	if err != nil || null {
		return err
	}
	return d.add(where, c)
}
