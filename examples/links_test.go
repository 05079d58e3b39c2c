package examples_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestMarkdownLinks checks that every relative link of the README,
// CONTRIBUTING, docs/ and examples/ resolves: the file or folder exists
// (inside the repository), and a #fragment names a heading of the target.
func TestMarkdownLinks(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, dir := range []string{"docs", "examples"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
				rel, _ := filepath.Rel(root, p)
				files = append(files, filepath.ToSlash(rel))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	anchors := map[string]map[string]bool{}
	headingsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		anchors[rel] = headingAnchors(data)
		return anchors[rel]
	}
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(data) {
			target, fragment, _ := strings.Cut(l.target, "#")
			rel := file
			if target != "" {
				rel = filepath.ToSlash(filepath.Join(filepath.Dir(file), target))
				if rel == ".." || strings.HasPrefix(rel, "../") {
					t.Errorf("%s:%d: %s leads outside the repository", file, l.line, l.target)
					continue
				}
			}
			checked++
			fi, err := os.Stat(filepath.Join(root, rel))
			if err != nil {
				t.Errorf("%s:%d: %s: %v", file, l.line, l.target, err)
				continue
			}
			if fragment == "" {
				continue
			}
			if fi.IsDir() || !strings.HasSuffix(rel, ".md") {
				t.Errorf("%s:%d: %s: a #fragment needs a Markdown file", file, l.line, l.target)
				continue
			}
			if !headingsOf(rel)[fragment] {
				t.Errorf("%s:%d: %s: %s has no heading #%s", file, l.line, l.target, rel, fragment)
			}
		}
	}
	if checked < 100 {
		t.Errorf("only %d relative links found in %d files: is the link parser broken?", checked, len(files))
	}
}

type link struct {
	target string
	line   int
}

var (
	inlineLink   = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	refLinkDef   = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+(\S+)`)
	codeSpan     = regexp.MustCompile("`+[^`]*`+")
	fence        = regexp.MustCompile("^\\s{0,3}(```|~~~)")
	schemePrefix = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// markdownLinks returns the relative link targets of a Markdown document,
// outside code blocks and code spans: inline links and images, and
// reference definitions. Absolute URLs (with a scheme) are left out.
func markdownLinks(data []byte) []link {
	var links []link
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLinkDef.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			target = strings.Trim(target, "<>")
			if schemePrefix.MatchString(target) {
				continue
			}
			links = append(links, link{target: target, line: n})
		}
	}
	return links
}

// headingAnchors returns the anchors GitHub gives a document's headings:
// the text lowercased, code-span backticks and punctuation other than '-'
// and '_' dropped, spaces turned into '-', and "-1", "-2"… after repeats.
func headingAnchors(data []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}
