package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ferrypkg/ferry/artifact/definition"
	"github.com/ferrypkg/ferry/artifact/zarf"
	"github.com/ferrypkg/ferry/cmd/ferry/internal/cli"
	"github.com/ferrypkg/ferry/internal/atomicfile"
)

// convertJSON is one converted zarf.yaml as -o json prints it.
type convertJSON struct {
	Source     string     `json:"source"`
	Definition string     `json:"definition,omitempty"`
	Files      []string   `json:"files,omitempty"`
	Config     string     `json:"config,omitempty"`
	Gaps       []zarf.Gap `json:"gaps"`
	Error      string     `json:"error,omitempty"`
}

func newConvertCmd() *cobra.Command {
	var (
		file, flavor, arch string
		set                map[string]string
		strict, force      bool
		output             cli.OutputFlag
	)
	cmd := &cobra.Command{
		Use:   "convert ZARF.YAML|DIR...",
		Short: "Convert Zarf package definitions (zarf.yaml) into ferry.yaml, reporting what differs",
		Example: `  # Convert one definition: ./app/ferry.yaml next to ./app/zarf.yaml
  ferry package convert app/zarf.yaml

  # Dozens at once, the report as JSON, failing on any gap
  ferry package convert packages/*/zarf.yaml -o json --strict

  # A flavor, an architecture and package templates, as zarf package create takes them
  ferry package convert . --flavor upstream --architecture arm64 --set VERSION=1.4.0`,
		Long: `Convert Zarf v0.60.0 package definitions (zarf.yaml, kind ZarfPackageConfig)
into ferry definitions: components (required, default), images, charts
(local, OCI, git and Helm repositories), manifests and kustomizations, files
and git repositories. Each ferry.yaml is written next to its zarf.yaml
(-f names it for a single one); paths stay relative to it.

What ferry does not do as Zarf does is reported, one line per gap:
  zarf.yaml:LINE: FIELD: what it is — the nearest ferry form
actions, variables and constants, data injections, health checks, only
conditions, values files, fields Zarf itself does not know, and the
###ZARF_VAR_…### templates of the manifests, values files and files named
(by their own file and line). Nothing is dropped without a line.

As zarf package create does: --flavor keeps the components of that flavor,
--architecture (default metadata.architecture, else this machine's) those
of that architecture, --set fills ###ZARF_PKG_TMPL_KEY###, as does the Zarf
config file's package.create.set (zarf-config.toml, .yaml, .yml or .json:
the one $ZARF_CONFIG names, else beside the zarf.yaml, else in the current
folder; --set wins); kustomizations are rendered now into zarf-kustomize/.
A folder without a zarf.yaml of its own converts every zarf.yaml below it. Charts, manifests and files Zarf
downloads at create become paths under zarf-charts/, zarf-manifests/ and
zarf-files/, with the command that fetches each: create refuses the
definition until they are there.

Gaps are warnings: the exit status is 1 only when a definition could not be
converted (the others still are), or with --strict when there is a gap.
An existing ferry.yaml is kept unless --force.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Validate(); err != nil {
				return err
			}
			if file != "" && len(args) > 1 {
				return errors.New("-f names the ferry.yaml of a single zarf.yaml; with several, each is written next to its zarf.yaml")
			}
			srcs, err := zarfDefinitions(args)
			if err != nil {
				return err
			}
			if file != "" && len(srcs) > 1 {
				return fmt.Errorf("-f names the ferry.yaml of a single zarf.yaml; %s holds %d", args[0], len(srcs))
			}
			// Each report is printed as it is made and not kept: 1,000
			// definitions of 49,000 gaps each are 49 million gaps.
			reports := jsonArray{w: cmd.OutOrStdout()}
			failed, gaps := 0, 0
			for _, src := range srcs {
				rep, err := convertOne(src, file, force, zarf.ConvertOptions{Flavor: flavor, Architecture: arch, Set: set})
				if err != nil && len(srcs) == 1 && !output.JSON() {
					return err
				}
				if err != nil {
					failed++
					rep.Error = cli.Advise(err, advice).Error()
				}
				gaps += len(rep.Gaps)
				if output.JSON() {
					if err := reports.add(rep); err != nil {
						return err
					}
				} else {
					printConverted(cmd.OutOrStdout(), cmd.ErrOrStderr(), rep)
				}
			}
			if output.JSON() {
				if err := reports.close(); err != nil {
					return err
				}
			}
			switch {
			case failed > 0:
				return fmt.Errorf("%d of %s not converted", failed, plural(len(srcs), "definition"))
			case strict && gaps > 0:
				return fmt.Errorf("--strict: %s (see above)", plural(gaps, "gap"))
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the ferry.yaml to write (one zarf.yaml only; default: next to it)")
	cmd.Flags().StringVar(&flavor, "flavor", "", "keep the components of this flavor (only.flavor), as zarf package create --flavor")
	cmd.Flags().StringVar(&arch, "architecture", "", "the package's architecture, as zarf package create --architecture (default: metadata.architecture, else this machine's)")
	cmd.Flags().StringToStringVar(&set, "set", nil, "package template KEY=VALUE for ###ZARF_PKG_TMPL_KEY###, as zarf package create --set")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 1 when there is a gap")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite an existing ferry.yaml")
	output.Register(cmd)
	return cmd
}

// convertOne converts the zarf.yaml src and writes the ferry.yaml and the
// files it names, with the Zarf config file that zarf package create
// would read (zarfConfig).
func convertOne(src, out string, force bool, opts zarf.ConvertOptions) (convertJSON, error) {
	rep := convertJSON{Source: src, Gaps: []zarf.Gap{}}
	data, err := zarf.ReadDefinition(src)
	if err != nil {
		return rep, err
	}
	if opts.Config, err = zarfConfig(filepath.Dir(src)); err != nil {
		return rep, err
	}
	if opts.Config != nil {
		rep.Config = opts.Config.File
	}
	if out == "" {
		out = filepath.Join(filepath.Dir(src), definition.FileName)
	}
	if filepath.Base(out) != definition.FileName {
		return rep, fmt.Errorf("-f %s: a definition is a file named %s (ferry package create reads the folder)", out, definition.FileName)
	}
	if _, err := os.Stat(out); err == nil && !force {
		return rep, fmt.Errorf("%s exists: --force overwrites it", out)
	}
	opts.Dir = filepath.Dir(out)
	res, err := zarf.Convert(src, data, opts)
	if err != nil {
		return rep, err
	}
	rep.Gaps = res.Gaps
	for _, p := range sortedPaths(res.Files) {
		dst := filepath.Join(opts.Dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return rep, err
		}
		if err := writeAtomic(dst, res.Files[p]); err != nil {
			return rep, err
		}
		rep.Files = append(rep.Files, dst)
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return rep, err
	}
	if err := writeAtomic(out, res.Definition); err != nil {
		return rep, err
	}
	rep.Definition = out
	return rep, nil
}

func writeAtomic(p string, data []byte) error {
	_, err := atomicfile.Write(p, 0o644, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}

func sortedPaths(m map[string][]byte) []string {
	var ps []string
	for p := range m {
		ps = append(ps, p)
	}
	sort.Strings(ps)
	return ps
}

// printConverted prints one conversion: its gaps, one a line, then what
// was written (or why not).
func printConverted(out, errOut io.Writer, rep convertJSON) {
	for _, g := range rep.Gaps {
		fmt.Fprintln(out, g.String())
	}
	switch {
	case rep.Error != "":
		fmt.Fprintf(errOut, "ferry: %s: not converted: %s\n", rep.Source, rep.Error)
	default:
		written := rep.Definition
		if len(rep.Files) > 0 {
			written += " and " + strings.Join(rep.Files, ", ")
		}
		read := ""
		if rep.Config != "" {
			read = "; values from " + rep.Config
		}
		fmt.Fprintf(out, "%s: wrote %s (%s%s)\n", rep.Source, written, plural(len(rep.Gaps), "gap"), read)
	}
}

// jsonArray writes a JSON array an element at a time, as cli.WriteJSON
// writes the whole slice.
type jsonArray struct {
	w io.Writer
	n int
}

func (a *jsonArray) add(v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("  ", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	sep := "[\n  "
	if a.n > 0 {
		sep = ",\n  "
	}
	a.n++
	_, err := io.WriteString(a.w, sep+strings.TrimSuffix(b.String(), "\n"))
	return err
}

func (a *jsonArray) close() error {
	end := "\n]\n"
	if a.n == 0 {
		end = "[]\n"
	}
	_, err := io.WriteString(a.w, end)
	return err
}
