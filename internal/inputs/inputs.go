// Package inputs is the register of everything ferry reads that it did not
// write: each command's arguments and flags, every field of a definition
// (ferry's and Zarf's) that names something, the environment, registries'
// answers and the requests its servers take. Each Entry says what kind of
// input it is and what bounds it; the hostile test (cmd/ferry's
// TestHostileInputs) feeds every entry the corpus of its kind and fails on
// a command, flag, definition field or variable that is not here, so a new
// input cannot arrive without its guard. docs/limits.md's register table is
// checked against it.
package inputs

import "strings"

// Kind is what an input is; it decides the hostile corpus it is fed.
type Kind string

const (
	// None is not read from outside: a name, a number, a duration, an
	// address, a choice among fixed words.
	None Kind = "none"
	// File is a file read whole or in part (keys, certificates, receipts).
	// Its corpus: /dev/zero, a FIFO nobody writes, a folder, a 1 TiB sparse
	// file, a missing path, garbage.
	File Kind = "file"
	// YAML is a YAML or JSON document evaluated node by node (definitions,
	// values, zarf.yaml); its corpus adds many small nodes, deep nesting and
	// an alias bomb to File's.
	YAML Kind = "yaml"
	// Folder is a folder whose files are read (a definition's, a storage
	// root); a definition's folder is read through internal/confine.
	Folder Kind = "folder"
	// Package is a package: an archive, its parts, an OCI layout folder or
	// a registry reference. Its corpus adds trailing bytes and a damaged
	// archive to File's.
	Package Kind = "package"
	// Registry is a registry (or a reference into one) whose answers are
	// read: its corpus is a hostile registry on loopback (endless bodies,
	// huge declared sizes, endless pages).
	Registry Kind = "registry"
	// Chart is a Helm chart, rendered.
	Chart Kind = "chart"
	// URL is a URL kept, fetched or printed (git, storage, charts): checked
	// and always printed redacted.
	URL Kind = "url"
	// Stdin is standard input.
	Stdin Kind = "stdin"
	// Output is a path written: checked before anything is written, then
	// written whole or not at all.
	Output Kind = "output"
	// Request is a request to a server ferry runs (agent, git server,
	// dashboard, registry).
	Request Kind = "request"
	// Answer is an answer of a server ferry speaks to that is not a
	// registry (the fleet's centre); the test its entry names feeds it.
	Answer Kind = "answer"
	// Object is what ferry reads of an object of the cluster it runs in
	// (a Secret's keys), written by another command or by hand; the API
	// server bounds the object (1 MiB a Secret), its entry the rest.
	Object Kind = "object"
)

// Fed reports whether the hostile test feeds inputs of kind k a corpus
// through the command line.
func (k Kind) Fed() bool {
	switch k {
	case File, YAML, Folder, Package, Registry, Chart, Stdin, Output:
		return true
	}
	return false
}

// Entry is one input of the register.
type Entry struct {
	// Where names the input: "ferry package create ARGS" (a command's
	// arguments), "ferry package create --values" (a flag), "ferry.yaml
	// components[].files[].source" (a definition field), "zarf.yaml
	// ZarfFile.source" (a Zarf schema field), "env KUBECONFIG", "answer …"
	// (a registry's, the fleet centre's), "request …" (to a server),
	// "secret NAME KEY" (a key of a Secret in ferry's namespace),
	// "configmap NAME KEY" (a key of a ConfigMap there).
	Where string
	Kind  Kind
	// Bound says what holds the input: its limits and how it is opened.
	Bound string
	// Try is how the hostile test reaches the input: a ferry command line
	// (for a definition field, the component's YAML) where {} stands for
	// the hostile item and {pkg}, {pub}, {key}, {def}, {kube}, {reg}, {osv} (a folder of one OSV record),
	// {out} (its folder {outdir}), {root} for good fixtures the test
	// makes. Empty for a kind the test does not feed, or where Test names
	// the test that does.
	Try string
	// Budget overrides the test's time and memory budget for this input,
	// for inputs the issue gives a budget of their own (chart rendering).
	Budget *Budget
	// Accepts names corpus items this input takes as valid, which the
	// test does not feed it (a missing docker config file is no config).
	Accepts []string
	// Test names the test that feeds this input its corpus when Try cannot
	// (requests to servers, registries' answers reached through a fixture).
	Test string
	// Lines is how many lines a refusal of this input may have, one a
	// problem, where it is read past its mistakes (a dry run): 1 when 0.
	Lines int
}

// Budget is what one hostile run may cost: the whole ferry process tree's
// wall time and the peak resident set of its largest process.
type Budget struct {
	Seconds int
	MiB     int
}

// DefaultBudget is what a hostile input may cost unless its entry says
// otherwise: 20 s and 256 MiB, with a wide margin over the slowest
// refusals (docs/performance.md, "Hostile input") for a machine busy with
// other tests.
var DefaultBudget = Budget{Seconds: 20, MiB: 256}

// Family is the first word of an entry's Where: "ferry", "ferry.yaml",
// "zarf.yaml", "env", "answer", "request" or "secret".
func (e Entry) Family() string {
	f, _, _ := strings.Cut(e.Where, " ")
	return f
}
