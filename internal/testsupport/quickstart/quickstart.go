// Package quickstart reads the README's quickstart: the shell block after
// the Marker comment, which the tests run (examples, without a cluster;
// e2e, whole) so that it never rots.
package quickstart

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Marker precedes the quickstart's shell block in the README.
const Marker = "<!-- quickstart"

// Script returns the shell block (```sh or ```bash) that follows Marker in
// the file at path.
func Script(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	_, rest, ok := strings.Cut(string(data), Marker)
	if !ok {
		return "", fmt.Errorf("%s has no %q marker before its quickstart", path, Marker)
	}
	sc := bufio.NewScanner(strings.NewReader(rest))
	var lines []string
	in := false
	for sc.Scan() {
		switch line := sc.Text(); {
		case !in && (line == "```sh" || line == "```bash"):
			in = true
		case in && line == "```":
			return strings.Join(lines, "\n") + "\n", nil
		case in:
			lines = append(lines, line)
		}
	}
	return "", fmt.Errorf("%s: no closed shell block after the quickstart marker", path)
}

// SetVariables gives variables the script declares (NAME=value at a line's
// start) other values; each must be declared.
func SetVariables(script string, values map[string]string) (string, error) {
	for name, v := range values {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `=\S*`)
		if !re.MatchString(script) {
			return "", fmt.Errorf("the quickstart declares no %s=", name)
		}
		script = re.ReplaceAllLiteralString(script, name+"="+v)
	}
	return script, nil
}
