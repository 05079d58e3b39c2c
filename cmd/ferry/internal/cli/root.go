package cli

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// Hooks are what a binary brings to the command tree that the front and the
// full binary share.
type Hooks struct {
	// Add adds the binary's own commands to the root and to the package
	// and registry groups.
	Add func(root, pkg, reg *cobra.Command)
	// HandOff runs before the tree: the front binary execs the full one for
	// the commands that are not its own; it returns only if it does not.
	HandOff func(root *cobra.Command, args []string) error
	// FullVersion, if set, reports the full binary beside this one.
	FullVersion func(ctx context.Context) (*VersionInfo, string)
	// Advice, if set, maps the errors of the binary's own libraries to
	// what the user can type (see Advise).
	Advice []Advice
}

// NewTree builds the whole command tree of a binary; there are no
// package-level command globals, so tests can build a fresh tree per run.
func NewTree(h Hooks) *cobra.Command {
	root := &cobra.Command{
		Use:   "ferry",
		Short: "Carry Kubernetes software into air-gapped clusters as signed OCI packages",
		Example: `  # Make a package of ./app (its ferry.yaml), sign it and push it to a registry
  ferry package create ./app -f app.tar.zst
  ferry key generate
  ferry package sign app.tar.zst --key cosign.key
  ferry package push app.tar.zst registry.example.com/apps/app

  # Give the cluster its registry, then deploy the package and list what is deployed
  ferry init --key cosign.pub
  ferry deploy registry.example.com/apps/app:1.0.0 --key cosign.pub
  ferry list`,
		Version:       CurrentVersion().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("ferry {{.Version}}\n")
	pkg, reg := newPackageCmd(), newRegistryCmd()
	root.AddCommand(pkg, reg, newVersionCmd(h.FullVersion))
	if h.Add != nil {
		h.Add(root, pkg, reg)
	}
	root.SetFlagErrorFunc(flagError)
	GroupCmd(root)
	return root
}

// GroupCmd makes a command that only groups subcommands refuse an unknown
// subcommand — one line, exit 1, the nearest names suggested — instead of
// printing its help and exiting 0. With no argument it prints its help.
func GroupCmd(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			msg += fmt.Sprintf("; did you mean %q?", s[0])
		} else {
			var names []string
			for _, c := range cmd.Commands() {
				if c.IsAvailableCommand() {
					names = append(names, c.Name())
				}
			}
			msg += "; commands: " + strings.Join(names, ", ")
		}
		return fmt.Errorf("%s", msg)
	}
	return cmd
}

// unknownCommand refuses a command line naming a command that does not
// exist, whatever flags come with it: cobra prints the parent's help for
// `ferry frobnicate --help` and exits 0, as if it had done something.
func unknownCommand(root *cobra.Command, args []string) error {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		return nil // shell completion: cobra answers it
	}
	// The commands cobra adds only when it executes.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd(args...)
	cmd, rest, err := root.Find(args)
	if err != nil || !cmd.HasSubCommands() {
		return nil // cobra says it, or a leaf takes its own arguments
	}
	for _, a := range rest {
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") {
			if c, _, err := cmd.Find([]string{a}); err == nil && c != cmd {
				return nil
			}
			// The group's own RunE words the refusal.
			return cmd.RunE(cmd, []string{a})
		}
	}
	return nil
}

// flagError points a user of the old -O (the output format) to -o.
func flagError(cmd *cobra.Command, err error) error {
	if strings.Contains(err.Error(), "shorthand flag: 'O'") {
		return fmt.Errorf("%w: the output format is -o/--output (text or json)", err)
	}
	return err
}

// EnvFrontBuild carries the front binary's build identity to the full
// binary it hands a command to.
const EnvFrontBuild = "FERRY_FRONT_BUILD"

// writeInert writes r, a control character as \x1b: shown, never acting
// on the terminal.
func writeInert(b *strings.Builder, r rune) {
	if unicode.IsControl(r) {
		fmt.Fprintf(b, `\x%02x`, r)
		return
	}
	b.WriteRune(r)
}

// MaxErrorLine bounds the error line a command prints (2 KiB): an error
// can quote what came from outside (a registry's error body, a chart's
// fail message, a number in a JSON file), and a line of megabytes helps
// nobody.
const MaxErrorLine = 2 << 10

// OneLine folds an error onto a single line for the terminal: runs of
// white space become one space, control characters (a terminal's escape
// sequences, which text from a registry, a chart or a package may carry)
// are shown as \x1b, and a line longer than MaxErrorLine is cut, saying
// how long it was.
func OneLine(err error) string {
	var b strings.Builder
	space := false
	for _, r := range err.Error() {
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		writeInert(&b, r)
	}
	line := b.String()
	if len(line) > MaxErrorLine {
		cut := MaxErrorLine
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = fmt.Sprintf("%s… (%d bytes in all)", line[:cut], len(line))
	}
	return line
}
