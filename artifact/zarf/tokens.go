package zarf

import (
	"bytes"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"strings"

	"github.com/ferrypkg/ferry/internal/confine"
)

// zarfToken is a deploy-time Zarf template: variables, constants and
// Zarf's own values (###ZARF_REGISTRY###, ###ZARF_GIT_PUSH###…).
var zarfToken = regexp.MustCompile(`###ZARF_[A-Z0-9_]+###`)

// scanTokens reports, once per file and template, the deploy-time Zarf
// templates a text file holds (zarf package deploy replaces them in
// manifests, values files and files; ferry deploys them as they are). p,
// relative to odir, is read through it: a link out of it, a FIFO or a
// device is an error, a missing file is left to create. A folder's YAML
// and JSON files are scanned; a file over maxTokenScan bytes or holding a
// NUL byte is not.
func (c *converter) scanTokens(p string) error {
	if c.scanned[p] {
		return nil
	}
	f, fi, err := c.open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if fi.IsDir() {
		err := fs.WalkDir(c.fsys(), p, func(fp string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch strings.ToLower(path.Ext(fp)) {
			case ".yaml", ".yml", ".json":
				if d.Type().IsRegular() {
					return c.scanTokens(fp)
				}
			}
			return nil
		})
		return pathError(err)
	}
	if fi.Size() > maxTokenScan {
		return nil
	}
	data, err := confine.ReadAll(f, c.display(p), maxTokenScan)
	if errors.Is(err, confine.ErrTooLarge) {
		return nil
	}
	if err != nil {
		return pathError(err)
	}
	c.scanBytes(p, data)
	return nil
}

// scanBytes reports the templates of data, the file p (relative to odir).
func (c *converter) scanBytes(p string, data []byte) {
	if c.scanned[p] || bytes.IndexByte(data, 0) >= 0 {
		return
	}
	c.scanned[p] = true
	name := c.display(p)
	seen := map[string]bool{}
	for line := 1; len(data) > 0; line++ {
		l, rest, _ := bytes.Cut(data, []byte("\n"))
		data = rest
		for _, tok := range zarfToken.FindAll(l, -1) {
			if seen[string(tok)] {
				continue
			}
			seen[string(tok)] = true
			c.tokenGaps = append(c.tokenGaps, Gap{File: name, Line: line, What: clip(string(tok)) + " is replaced by zarf package deploy", Nearest: c.tokenNearest(string(tok))})
		}
	}
}

func (c *converter) tokenNearest(tok string) string {
	switch {
	case strings.HasPrefix(tok, "###ZARF_VAR_"):
		if _, ok := c.deployValue(strings.TrimSuffix(strings.TrimPrefix(tok, "###ZARF_VAR_"), "###")); ok {
			return "ferry deploys it as it is: write the value " + c.opts.Config.File + "'s package.deploy.set gives it, or make it a chart value set with `ferry deploy --set`"
		}
		fallthrough
	case strings.HasPrefix(tok, "###ZARF_CONST_"):
		return "ferry deploys it as it is: write the value, or make it a chart value set with `ferry deploy --set`"
	case tok == "###ZARF_REGISTRY###":
		return "ferry rewrites workload images to its registry itself: write the image's original reference"
	case strings.HasPrefix(tok, "###ZARF_GIT"):
		return "ferry points Flux and Argo CD objects at its git server itself: write the repository's original URL"
	}
	return "ferry deploys it as it is: write the value it stands for"
}

// deployValue is the value the Zarf config file's package.deploy.set
// gives the variable name, as zarf package deploy takes it.
func (c *converter) deployValue(name string) (string, bool) {
	if c.opts.Config == nil {
		return "", false
	}
	v, ok := c.opts.Config.DeploySet[strings.ToUpper(name)]
	return v, ok
}
