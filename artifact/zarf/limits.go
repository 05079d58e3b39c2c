package zarf

import "github.com/ferrypkg/ferry/artifact"

// Limits on what convert and import read from Zarf: a zarf.yaml, the files
// it names and a built package come from people nobody here vetted. Real
// ones stay far below each (Zarf v0.60.0's own examples and packages: the
// largest zarf.yaml is 8.3 KB, with 362 YAML nodes, 296 of the indicators
// MaxNodes counts and 12 components). Anything over a limit is refused in
// one line naming it, before anything is written; docs/limits.md lists
// them.
const (
	// MaxNodes bounds the YAML nodes of a zarf.yaml (200,000), an alias
	// counted as what it stands for. Before the parse, the text is held to
	// an upper bound of what it can make — four nodes for each ':', '-',
	// '?', ',', '[' and '{' (at most 50,000 of them) — so that the parse
	// itself is bounded (the YAML library spends about 200 bytes a node);
	// after it, aliases are expanded in the count, so that an alias bomb
	// is refused before it is walked.
	MaxNodes = 200_000

	// MaxComponents bounds the components of a zarf.yaml (10,000), checked
	// before any is converted.
	MaxComponents = 10_000

	// MaxFiles bounds the files a zarf.yaml's files entries carry, each
	// folder counted by its files (100,000: the blobs a package may hold,
	// artifact.MaxBlobs).
	MaxFiles = artifact.MaxBlobs

	// MaxEntries bounds the entries of a built Zarf package: its tar and
	// the component tars and sboms.tar inside it, together (100,000; a
	// package's entries are mostly its images' blobs, as in
	// artifact.MaxBlobs).
	MaxEntries = artifact.MaxBlobs

	// MaxParts bounds the parts of a multi-part Zarf package (10,000, as
	// artifact.MaxParts).
	MaxParts = artifact.MaxParts

	// MaxQuoted bounds a value of a zarf.yaml or of a package quoted in an
	// error or a gap (256 bytes), and 4 times that a whole message: longer
	// ones are cut, saying how long they were, and a message about many
	// offenders names the first and counts the others, so that every line
	// printed about them stays short.
	MaxQuoted = 256

	// MaxConfigSize bounds a Zarf config file (zarf-config.toml, .yaml,
	// .yml, .json) convert reads: 256 KiB (Zarf's own are under 3 KB, a
	// TLS key included).
	MaxConfigSize = 256 << 10

	// MaxConfigNesting bounds, before a Zarf config file in TOML is
	// parsed, its '{' (inline tables) and the '.' of any one line (dotted
	// keys): 256 each. The TOML library's time grows with the square of
	// their depth (60 KB of dotted key costs it 9 s and 10 GiB); at 256 it
	// spends a few milliseconds.
	MaxConfigNesting = 256

	// MaxConfigBrackets bounds the '[' of a Zarf config file in TOML
	// (table headers and arrays), counted before it is parsed: 4,096.
	// The TOML library holds a nested array's depth on its stack and in
	// its state; at this count it costs a few MiB.
	MaxConfigBrackets = 4096

	// MaxWalk bounds the files and folders convert looks through below a
	// folder that holds no zarf.yaml (100,000), and MaxDefinitions the
	// zarf.yaml files it finds there (1,000; Zarf v0.60.0's repository
	// holds 109).
	MaxWalk        = 100_000
	MaxDefinitions = 1_000

	// maxTokenScan bounds a file scanned for Zarf's deploy-time templates
	// (8 MiB): a larger one, or one holding a NUL byte, is not scanned.
	maxTokenScan = 8 << 20
)
