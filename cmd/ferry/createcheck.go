package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact/build"
	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/gitrepo"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/redact"
)

// checkDefinition is `package create --dry-run`: the definition at src
// read past its mistakes (definition.Check), then, when it has none, every
// check create makes that needs no network (build.Check). Each problem is
// a line of its own on standard error, and any makes the exit status 1;
// standard output says what was checked and what was not.
func checkDefinition(cmd *cobra.Command, src string, charts build.ChartPackager, render build.ChartRenderer, jsonOut bool) error {
	def, problems := definition.Check(src)
	file := src
	res := &build.CheckResult{}
	reached := def != nil && len(problems) == 0
	if def != nil {
		file = def.File
		if reached {
			var err error
			if res, err = build.Check(cmd.Context(), def, build.CheckOptions{Charts: charts, Render: render, Git: gitrepo.Fetcher{}}); err != nil {
				return err
			}
			problems = res.Problems
		}
	}
	out := cmd.OutOrStdout()
	if jsonOut {
		if err := cli.WriteJSON(out, map[string]any{
			"definition": file, "problems": problemsJSON(file, problems), "checked": res.Checked,
			"notChecked": res.NotChecked, "foundImages": foundOf(&build.CreateResult{Found: res.Found}),
		}); err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("%s: %s (listed on standard output)", file, plural(len(problems), "problem"))
		}
		return nil
	}
	writeCheckSummary(out, file, reached, problems, res)
	if len(problems) > 0 {
		return cli.Problems(problems)
	}
	return nil
}

// writeCheckSummary says what a dry run checked and found; checked says
// whether the definition's entries were reached at all.
func writeCheckSummary(w io.Writer, file string, checked bool, problems []error, res *build.CheckResult) {
	verdict := "no problems"
	if len(problems) > 0 {
		verdict = plural(len(problems), "problem")
	}
	if !checked {
		fmt.Fprintf(w, "checked %s: %s in the definition; its images, charts and files are checked once it has none\n", file, verdict)
		return
	}
	fmt.Fprintf(w, "checked %s: %s; read %s\n", file, verdict, countText(res.Checked, "nothing"))
	if res.NotChecked != (build.Count{}) {
		fmt.Fprintf(w, "not checked (needs the network): %s\n", countText(res.NotChecked, ""))
	}
	for _, c := range res.Found {
		for _, ref := range c.Missing {
			fmt.Fprintf(w, "found image %s (component %s, findImages)\n", ref, c.Name)
		}
	}
}

// countText says a Count in words: "2 images, 1 chart", or none when it
// is zero.
func countText(c build.Count, none string) string {
	var parts []string
	for _, n := range []struct {
		n    int
		what string
	}{
		{c.Images, "image"}, {c.Charts, "chart"}, {c.Repositories, "git repository"},
		{c.Manifests, "manifest entry"}, {c.Files, "file"}, {c.Policies, "image policy"},
	} {
		if n.n > 0 {
			parts = append(parts, plural(n.n, n.what))
		}
	}
	if len(parts) == 0 {
		return none
	}
	return strings.Join(parts, ", ")
}

// plural is "1 image", "2 images", "2 git repositories".
func plural(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// problemJSON is a problem in -o json: where it is and what it says.
type problemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// problemsJSON lists problems for -o json, redacted as the error lines
// are; a problem that names no place is file's.
func problemsJSON(file string, problems []error) []problemJSON {
	out := []problemJSON{}
	for _, p := range problems {
		var e *definition.Error
		if errors.As(p, &e) {
			out = append(out, problemJSON{File: e.File, Line: e.Line, Field: e.Field, Message: redact.Text(e.Msg)})
			continue
		}
		out = append(out, problemJSON{File: file, Message: redact.Text(p.Error())})
	}
	return out
}
