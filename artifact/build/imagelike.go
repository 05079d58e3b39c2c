package build

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/distribution/reference"

	"github.com/ferrypkg/ferry/internal/podspec"
)

// Placeholders are the image references charts write where an image goes
// that no registry serves and no node pulls, with why each is one.
// FindImages reports them apart and never as images to carry.
var Placeholders = map[string]string{
	// Istio's gateway chart and injection templates: its sidecar injector
	// replaces the image `auto` with its proxy image (proxyv2) when the Pod
	// is created.
	"docker.io/library/auto:latest": "Istio's injector replaces it with its proxy image when the Pod is created",
}

// MaxMaybe is how many maybe images FindImages lists for a component at
// most; past it, ComponentImages.MaybeLimited says that more may be.
const MaxMaybe = 256

// maxImageLike is the longest string read as an image-like reference (a
// name is at most 255 characters, a tag 128, a digest 71 and more).
const maxImageLike = 512

// maxStructuredValue is the largest ConfigMap value decoded as JSON to
// join image names to their hub and tag; a larger one is read as text only.
const maxStructuredValue = 4 << 20

// maybeObject adds to s.maybe the image-like strings of one object outside
// its image fields: the arguments, commands and environment values of a
// workload's containers, a ConfigMap's data, and every annotation.
func (s *scan) maybeObject(obj map[string]any, kind, where string) {
	s.annotations(obj, where)
	if podspec.IsWorkload(kind) {
		for _, c := range podspec.Containers(podspec.Of(obj)) {
			name, _ := c.Map["name"].(string)
			at := fmt.Sprintf("%s: container %s", where, name)
			for _, field := range []string{"command", "args"} {
				list, _ := c.Map[field].([]any)
				for _, a := range list {
					if str, ok := a.(string); ok {
						s.imageLike(str, at+" "+field)
					}
				}
			}
			env, _ := c.Map["env"].([]any)
			for _, e := range env {
				m, _ := e.(map[string]any)
				if v, ok := m["value"].(string); ok {
					s.imageLike(v, fmt.Sprintf("%s env %v", at, m["name"]))
				}
			}
		}
	}
	if kind == "ConfigMap" {
		data, _ := obj["data"].(map[string]any)
		for k, v := range data {
			str, ok := v.(string)
			if !ok {
				continue
			}
			at := where + ": data." + k
			s.imageLike(str, at)
			if t := strings.TrimSpace(str); len(t) <= maxStructuredValue && strings.HasPrefix(t, "{") {
				var tree any
				if json.Unmarshal([]byte(t), &tree) == nil {
					s.hubImages(tree, "", "", at)
				}
			}
		}
	}
}

// annotations reads the annotations of every metadata inside v (the
// object's own, its pod template's).
func (s *scan) annotations(v any, where string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if md, ok := e.(map[string]any); ok && k == "metadata" {
				ann, _ := md["annotations"].(map[string]any)
				for name, a := range ann {
					if str, ok := a.(string); ok {
						s.imageLike(str, where+": annotation "+name)
					}
				}
				continue
			}
			s.annotations(e, where)
		}
	case []any:
		for _, e := range v {
			s.annotations(e, where)
		}
	}
}

// hubImages adds the image names of a decoded JSON document joined to the
// nearest hub and tag of the objects holding them, as Istio's values give
// its proxy image (global.hub, global.tag, global.proxy.image: proxyv2) and
// its injector joins them.
func (s *scan) hubImages(v any, hub, tag, where string) {
	switch v := v.(type) {
	case map[string]any:
		if h, _ := v["hub"].(string); h != "" {
			hub = h
		}
		if t, _ := v["tag"].(string); t != "" {
			tag = t
		}
		for k, e := range v {
			if name, ok := e.(string); ok && k == "image" {
				if hub != "" && tag != "" && name != "" && !strings.ContainsAny(name, "/:@") {
					s.addMaybe(hub+"/"+name+":"+tag, where, true)
				}
				continue
			}
			s.hubImages(e, hub, tag, where)
		}
	case []any:
		for _, e := range v {
			s.hubImages(e, hub, tag, where)
		}
	}
}

// imageLike adds the image-like words of text to s.maybe: a word that a
// reference parser reads as a repository under a registry or namespace
// with a tag or digest (ghcr.io/org/app:1.2, org/app@sha256:…), or, after
// a key `image:`, any reference with a registry, path, tag or digest. A
// word ends at white space, a quote, `=`, `,`, `;` or a bracket. One pass
// over text.
func (s *scan) imageLike(text, where string) {
	afterImageKey := false
	start := -1
	word := func(end int) {
		w := text[start:end]
		start = -1
		if w == ":" && afterImageKey {
			return // "image": "x" — the colon stands apart
		}
		after := afterImageKey
		afterImageKey = w == "image:" || w == "image"
		w = strings.TrimRight(w, ".:")
		if len(w) > maxImageLike || strings.Contains(w, "://") {
			return
		}
		if strings.Contains(w, "/") && strings.ContainsAny(w, ":@") {
			s.addMaybe(w, where, true)
		} else if after && strings.ContainsAny(w, "/:@") {
			s.addMaybe(w, where, false)
		}
	}
	for i := 0; i < len(text); i++ {
		if isWordBreak(text[i]) {
			if start >= 0 {
				word(i)
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		word(len(text))
	}
}

// isWordBreak reports whether b ends an image-like word.
func isWordBreak(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '\f', '\v', '"', '\'', '`', '=', ',', ';', '(', ')', '[', ']', '{', '}', '<', '>', '|', '\\':
		return true
	}
	return false
}

// maxParsed is how many words a scan remembers the parse of; a word past
// it is parsed each time it is seen.
const maxParsed = 1 << 16

// maxParsedBytes is how many bytes of distinct words a scan gives the
// reference parser (a few µs a word); past it, the scan stops looking for
// maybe images and says so (ComponentImages.MaybeLimited). Real charts
// give it a few KiB.
const maxParsedBytes = 4 << 20

// parsed is what the reference parser made of a word: its normalized
// reference ("" when it is none), and whether it has a tag or digest.
type parsed struct {
	ref    string
	pinned bool
}

// addMaybe adds w to s.maybe when a reference parser reads it as an image
// reference, and when strict, one with a tag or digest.
func (s *scan) addMaybe(w, where string, strict bool) {
	p, ok := s.parsed[w]
	if !ok && s.maybeLimited {
		return // a new word could only be one more past the limit
	}
	if !ok {
		if s.parsedBytes += len(w); s.parsedBytes > maxParsedBytes {
			s.maybeLimited = true
			return
		}
		p = parseImageLike(w)
		if len(s.parsed) < maxParsed {
			s.parsed[w] = p
		}
	}
	if p.ref == "" || strict && !p.pinned || Placeholders[p.ref] != "" {
		return
	}
	if len(s.maybe) >= MaxMaybe && s.maybe[p.ref] == nil {
		s.maybeLimited = true
		return
	}
	s.maybe.add(p.ref, where, false)
}

// parseImageLike parses w as an image reference; only the characters of
// one are let through to the parser.
func parseImageLike(w string) parsed {
	for i := 0; i < len(w); i++ {
		if b := w[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b >= 'A' && b <= 'Z' || strings.IndexByte("._-/:@", b) >= 0) {
			return parsed{}
		}
	}
	named, err := reference.ParseNormalizedNamed(w)
	if err != nil {
		return parsed{}
	}
	_, tagged := named.(reference.Tagged)
	_, digested := named.(reference.Digested)
	return parsed{ref: reference.TagNameOnly(named).String(), pinned: tagged || digested}
}
