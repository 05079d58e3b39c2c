package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandHasExamples walks the full binary's command tree: every
// runnable command has an Example, and every `ferry …` line of it names a
// real runnable command whose flags parse and whose positional arguments
// its Args validator accepts, as a fresh tree sees them.
func TestEveryCommandHasExamples(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Hidden || isCobraBuiltin(c) {
			return
		}
		n++
		path := c.CommandPath()
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%s: no Example", path)
			return
		}
		self := false
		lines := 0
		for _, line := range strings.Split(c.Example, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "ferry ") && line != "ferry" {
				continue
			}
			lines++
			named, err := checkExampleLine(line)
			if err != nil {
				t.Errorf("%s: example %q: %v", path, line, err)
				continue
			}
			if named == path {
				self = true
			}
		}
		switch {
		case lines == 0:
			t.Errorf("%s: Example has no `ferry …` line", path)
		case !self && !c.HasSubCommands():
			// A group's examples show its subcommands; a leaf's show itself.
			t.Errorf("%s: no example runs %s itself", path, path)
		}
	}
	walk(newRootCmd())
	if n < 20 {
		t.Fatalf("walked %d runnable commands; the tree is not the full binary's", n)
	}
}

func isCobraBuiltin(c *cobra.Command) bool {
	for p := c; p != nil; p = p.Parent() {
		if p.Name() == "help" || p.Name() == "completion" {
			return true
		}
	}
	return false
}

// checkExampleLine finds the command an example line runs in a fresh tree,
// parses its flags and validates its positional arguments, and returns the
// command's path.
func checkExampleLine(line string) (string, error) {
	words, err := shellWords(line)
	if err != nil {
		return "", err
	}
	if len(words) == 0 || words[0] != "ferry" {
		return "", fmt.Errorf("does not start with ferry: %q", words)
	}
	root := newRootCmd()
	c, rest, err := root.Find(words[1:])
	if err != nil {
		return "", fmt.Errorf("find: %w", err)
	}
	if !c.Runnable() || c.Hidden || isCobraBuiltin(c) {
		return "", fmt.Errorf("%s is not a runnable command", c.CommandPath())
	}
	if err := c.ParseFlags(rest); err != nil {
		return "", fmt.Errorf("%s: flags: %w", c.CommandPath(), err)
	}
	args := c.Flags().Args()
	if c.HasSubCommands() && len(args) > 0 {
		return "", fmt.Errorf("%s has no subcommand %q", c.CommandPath(), args[0])
	}
	if err := c.ValidateArgs(args); err != nil {
		return "", fmt.Errorf("%s: args %q: %w", c.CommandPath(), args, err)
	}
	return c.CommandPath(), nil
}

// shellWords splits one shell command line as sh would for a simple
// command: single and double quotes, backslash escapes; it stops at a
// comment or at the first unquoted operator (| & ; < >), where the command's
// own words end.
func shellWords(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote rune
	)
	end := func() {
		if in {
			words = append(words, cur.String())
			cur.Reset()
			in = false
		}
	}
	rs := []rune(line)
loop:
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			switch {
			case r == '"':
				quote = 0
			case r == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]):
				i++
				cur.WriteRune(rs[i])
			default:
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == '\\':
			if i+1 == len(rs) {
				return nil, fmt.Errorf("line ends with a backslash")
			}
			i++
			cur.WriteRune(rs[i])
			in = true
		case r == ' ' || r == '\t':
			end()
		case r == '#' && !in:
			break loop
		case strings.ContainsRune("|&;<>", r):
			break loop
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	end()
	return words, nil
}

func TestShellWords(t *testing.T) {
	for line, want := range map[string]string{
		`ferry a b  # comment`:                       "ferry|a|b",
		`ferry x 's3://b?e=u&p=t' "a b" c\ d`:        `ferry|x|s3://b?e=u&p=t|a b|c d`,
		`ferry login r -u ci --password-stdin < tok`: "ferry|login|r|-u|ci|--password-stdin",
		`ferry connect &`:                            "ferry|connect",
		`ferry a#b "x\"y"`:                           `ferry|a#b|x"y`,
	} {
		got, err := shellWords(line)
		if err != nil {
			t.Errorf("%q: %v", line, err)
			continue
		}
		if g := strings.Join(got, "|"); g != want {
			t.Errorf("%q: got %q, want %q", line, g, want)
		}
	}
	if _, err := shellWords(`ferry 'open`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}
