package build

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ferrypkg/ferry/artifact/definition"
)

// CheckOptions configures Check: the chart packager, renderer and git
// fetcher Create would be given (see CreateOptions). Without Charts a
// definition with local charts has a problem there, as Create would.
type CheckOptions struct {
	Charts ChartPackager
	Render ChartRenderer
	Git    GitFetcher
}

// CheckResult is what Check found.
type CheckResult struct {
	// Problems are the definition's mistakes, each a *definition.Error
	// naming the file, the line and the field, in the definition's order.
	Problems []error
	// Checked counts what was read: images from OCI layouts, charts from
	// folders and archives, git repositories from local clones, manifests,
	// files and image policies.
	Checked Count
	// NotChecked counts what needs the network: images, charts and git
	// repositories in registries and on servers, the images findImages
	// found among them.
	NotChecked Count
	// Found compares, for each component with `findImages: true`, the
	// images of its local charts and manifests with those it lists, as
	// CreateResult.Found does; charts in registries are not rendered.
	Found []ComponentImages
}

// Count counts a definition's entries by kind.
type Count struct {
	Images       int `json:"images"`
	Charts       int `json:"charts"`
	Repositories int `json:"repositories"`
	Manifests    int `json:"manifests"`
	Files        int `json:"files"`
	Advisories   int `json:"advisories"`
	Policies     int `json:"policies"`
}

// Check makes every check of Create that needs no network, and goes on
// past each problem to find the next: the image policies (their keys and
// trusted roots), the images of OCI layouts (their manifests, platforms,
// signatures and policies; not their layers), local charts packaged
// (and, for findImages, rendered) as Create does, local git repositories,
// manifests and files. Nothing is fetched and nothing is written; images,
// charts and repositories elsewhere are counted in NotChecked. SBOMs are
// not made. The error is the context's, when it ends first.
func Check(ctx context.Context, def *definition.Definition, opts CheckOptions) (*CheckResult, error) {
	c := &checker{res: &CheckResult{}, seen: map[string]bool{}}
	c.b = newBuilder(def, CreateOptions{Charts: opts.Charts, Render: opts.Render, Git: opts.Git})
	defer c.b.cleanup()
	folder, err := def.OpenFolder()
	if err != nil {
		c.problem(&definition.Error{File: def.File, Msg: err.Error(), Err: err})
		return c.res, nil
	}
	c.b.folder = folder
	for _, d := range c.b.usedPolicies() {
		pol, err := c.b.imagePolicy(d)
		if err != nil {
			c.problem(c.b.policyError(d, err))
			continue
		}
		c.b.policies = append(c.b.policies, pol)
		c.res.Checked.Policies++
	}
	for ci, cd := range def.Components {
		c.component(ctx, ci, cd)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	// In the file's order, as an editor goes through them.
	slices.SortStableFunc(c.res.Problems, func(a, b error) int { return cmp.Compare(lineOf(a), lineOf(b)) })
	return c.res, nil
}

// checker is one Check: a builder that keeps nothing but what the checks
// read, and the result.
type checker struct {
	b   *builder
	res *CheckResult
	// seen are the fields with a problem reported (else its text): the
	// findImages pass and the entries' own would report a chart or a
	// manifest twice.
	seen map[string]bool
}

// lineOf is the line of the definition err names, 0 if none.
func lineOf(err error) int {
	var e *definition.Error
	if errors.As(err, &e) {
		return e.Line
	}
	return 0
}

func (c *checker) problem(err error) {
	key := err.Error()
	var e *definition.Error
	if errors.As(err, &e) && e.Field != "" {
		key = e.Field
	}
	if !c.seen[key] {
		c.seen[key] = true
		c.res.Problems = append(c.res.Problems, err)
	}
}

// at reports err at an entry of the definition.
func (c *checker) at(line int, field string, err error) {
	c.problem(&definition.Error{File: c.b.def.File, Line: line, Field: field, Msg: err.Error(), Err: err})
}

// component checks one component's entries, in Create's order.
func (c *checker) component(ctx context.Context, ci int, cd definition.Component) {
	b := c.b
	images := cd.Images
	if cd.FindImages {
		f := &imageFinder{def: b.def, folder: b.folder, opts: FindImagesOptions{Charts: b.opts.Charts, Render: b.opts.Render}, problem: c.problem, offline: true}
		found, err := f.component(ctx, ci, cd)
		if err == nil {
			c.res.Found = append(c.res.Found, found)
			for _, ref := range found.Missing {
				images = append(images[:len(images):len(images)], definition.Image{Ref: ref, Line: cd.Line})
			}
		}
	}
	for ii, img := range images {
		if img.Layout == "" {
			c.res.NotChecked.Images++
			continue
		}
		field := fmt.Sprintf("components[%d].images[%d]", ci, ii)
		stored, rec, _, sigs, err := b.image(ctx, cd.Name, img)
		if err == nil {
			err = b.checkImagePolicy(ctx, cd, img, &rec, stored, sigs)
		}
		if err != nil {
			c.at(img.Line, field, err)
			continue
		}
		c.res.Checked.Images++
	}
	for hi, ch := range cd.Charts {
		if ch.URL != "" {
			c.res.NotChecked.Charts++
			continue
		}
		if _, _, err := b.chart(ctx, ch); err != nil {
			c.at(ch.Line, fmt.Sprintf("components[%d].charts[%d]", ci, hi), err)
			continue
		}
		c.res.Checked.Charts++
	}
	for gi, gd := range cd.Repositories {
		if gd.Path == "" {
			c.res.NotChecked.Repositories++
			continue
		}
		if _, _, err := b.repository(ctx, gd); err != nil {
			c.at(gd.Line, fmt.Sprintf("components[%d].repositories[%d]", ci, gi), err)
			continue
		}
		c.res.Checked.Repositories++
	}
	for mi, md := range cd.Manifests {
		if _, _, err := manifestBundle(b.folder, md); err != nil {
			c.at(md.Line, fmt.Sprintf("components[%d].manifests[%d]", ci, mi), err)
			continue
		}
		c.res.Checked.Manifests++
	}
	for fi, fd := range cd.Files {
		if _, err := b.file(fd); err != nil {
			c.at(fd.Line, fmt.Sprintf("components[%d].files[%d]", ci, fi), err)
			continue
		}
		c.res.Checked.Files++
	}
	for ai, ad := range cd.Advisories {
		if _, _, err := b.advisories(ad); err != nil {
			c.at(ad.Line, fmt.Sprintf("components[%d].advisories[%d]", ci, ai), err)
			continue
		}
		c.res.Checked.Advisories++
	}
}
