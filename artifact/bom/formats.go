package bom

import (
	"encoding/json"
	"fmt"
	"strings"
)

// SPDX 2.x JSON (https://spdx.github.io/spdx-spec/v2.3/): each package of
// "packages" is a component; files and snippets are not. The package of
// the image itself (Syft's DocumentRoot, purpose CONTAINER) is kept.
var spdxFormat = format{name: "SPDX document", field: func(d *docReader, key string) error {
	switch key {
	case "spdxVersion":
		var v string
		if err := d.decode(loc{kind: "spdxVersion", i: -1}, &v); err != nil {
			return err
		}
		if !strings.HasPrefix(v, "SPDX-2.") {
			return fmt.Errorf("version %.40q is not SPDX 2.x", v)
		}
		return nil
	case "packages":
		return d.array("packages", func(i int) error {
			where := loc{kind: "package", i: i}
			var p spdxPackage
			if err := d.decode(where, &p); err != nil {
				return err
			}
			c := Component{Name: p.Name, Version: p.VersionInfo, Type: strings.ToLower(p.PrimaryPackagePurpose)}
			for _, r := range p.ExternalRefs {
				if r.ReferenceType == "purl" && c.PURL == "" {
					c.PURL = r.ReferenceLocator
				}
			}
			c.Licenses = licenses(nil, p.LicenseDeclared, p.LicenseConcluded)
			return d.add(where, c)
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

// CycloneDX JSON (https://cyclonedx.org/docs/1.6/json/): the subject
// (metadata.component) and every component, nested ones included, but
// files.
var cycloneDXFormat = format{name: "CycloneDX document", field: func(d *docReader, key string) error {
	switch key {
	case "bomFormat":
		var v string
		if err := d.decode(loc{kind: "bomFormat", i: -1}, &v); err != nil {
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
			var c cdxComponent
			if err := d.decode(loc{kind: "metadata.component", i: -1}, &c); err != nil {
				return err
			}
			return d.addCDX(loc{kind: "metadata.component", i: -1}, c)
		})
	case "components":
		return d.array("components", func(i int) error {
			where := loc{kind: "component", i: i}
			var c cdxComponent
			if err := d.decode(where, &c); err != nil {
				return err
			}
			return d.addCDX(where, c)
		})
	}
	return d.skip()
}}

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

// addCDX adds c and the components nested in it, but files.
func (d *docReader) addCDX(where loc, c cdxComponent) error {
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
		if err := d.addCDX(loc{kind: "component", i: i, parent: &where}, n); err != nil {
			return err
		}
	}
	return nil
}

// Syft JSON (https://github.com/anchore/syft/tree/main/schema/json): each
// artifact is a component.
var syftFormat = format{name: "Syft document", field: func(d *docReader, key string) error {
	if key != "artifacts" {
		return d.skip()
	}
	return d.array("artifacts", func(i int) error {
		where := loc{kind: "artifact", i: i}
		var a struct {
			Name     string        `json:"name"`
			Version  string        `json:"version"`
			Type     string        `json:"type"`
			PURL     string        `json:"purl"`
			Licenses []syftLicense `json:"licenses"`
		}
		if err := d.decode(where, &a); err != nil {
			return err
		}
		c := Component{Name: a.Name, Version: a.Version, Type: a.Type, PURL: a.PURL}
		for _, l := range a.Licenses {
			c.Licenses = licenses(c.Licenses, string(l))
		}
		return d.add(where, c)
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
