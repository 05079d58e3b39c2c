package bomscan

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// SARIF 2.1.0 (https://docs.oasis-open.org/sarif/sarif/v2.1.0/), the
// subset code-scanning tools read: one run, a rule per advisory, a result
// per finding whose location is the image.
type sarifLog struct {
	Schema  string     `json:"$schema"`
	Version string     `json:"version"`
	Runs    []sarifRun `json:"runs"`
}

type sarifRun struct {
	Tool       sarifTool      `json:"tool"`
	Results    []sarifResult  `json:"results"`
	Properties map[string]any `json:"properties,omitempty"`
}

type sarifTool struct {
	Driver sarifDriver `json:"driver"`
}

type sarifDriver struct {
	Name           string      `json:"name"`
	InformationURI string      `json:"informationUri"`
	Rules          []sarifRule `json:"rules"`
}

type sarifText struct {
	Text string `json:"text"`
}

type sarifRule struct {
	ID               string         `json:"id"`
	ShortDescription sarifText      `json:"shortDescription"`
	HelpURI          string         `json:"helpUri,omitempty"`
	Properties       map[string]any `json:"properties,omitempty"`
}

type sarifResult struct {
	RuleID     string          `json:"ruleId"`
	Level      string          `json:"level"`
	Message    sarifText       `json:"message"`
	Locations  []sarifLocation `json:"locations"`
	Properties map[string]any  `json:"properties,omitempty"`
}

type sarifLocation struct {
	PhysicalLocation sarifPhysical  `json:"physicalLocation"`
	LogicalLocations []sarifLogical `json:"logicalLocations,omitempty"`
}

type sarifPhysical struct {
	ArtifactLocation struct {
		URI string `json:"uri"`
	} `json:"artifactLocation"`
}

type sarifLogical struct {
	Name               string `json:"name"`
	FullyQualifiedName string `json:"fullyQualifiedName,omitempty"`
	Kind               string `json:"kind"`
}

// WriteSARIF writes findings as a SARIF 2.1.0 log: a rule per advisory
// (its id, summary and aliases), a result per finding located at the image
// (and, logically, at the package and the component), the advisory
// database's date in the run's properties.
func WriteSARIF(w io.Writer, fs []Finding, dbDate time.Time) error {
	run := sarifRun{
		Tool:    sarifTool{Driver: sarifDriver{Name: "ferry", InformationURI: "https://github.com/ferrypkg/ferry", Rules: []sarifRule{}}},
		Results: []sarifResult{},
	}
	if !dbDate.IsZero() {
		run.Properties = map[string]any{"databaseDate": dbDate.UTC().Format(time.RFC3339)}
	}
	rules := map[string]bool{}
	for _, f := range fs {
		m := f.Match
		if !rules[m.ID] {
			rules[m.ID] = true
			props := map[string]any{}
			if len(m.Aliases) > 0 {
				props["aliases"] = m.Aliases
			}
			if sev := fmt.Sprint(m.Severity); sev != "" {
				props["severity"] = sev
			}
			summary := m.Summary
			if summary == "" {
				summary = m.ID
			}
			run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{ID: m.ID, ShortDescription: sarifText{summary}, HelpURI: "https://osv.dev/vulnerability/" + m.ID, Properties: props})
		}
		fixed := m.Fixed
		if fixed == "" {
			fixed = "no fixed version"
		}
		loc := sarifLocation{LogicalLocations: []sarifLogical{
			{Name: f.Package, FullyQualifiedName: f.Package + "@" + f.Version, Kind: "package"},
			{Name: f.Component.Name, FullyQualifiedName: f.Component.PURL, Kind: "module"},
		}}
		loc.PhysicalLocation.ArtifactLocation.URI = f.Image
		props := map[string]any{"package": f.Package, "version": f.Version, "platform": f.Platform, "sbom": f.SBOM.String(),
			"component": f.Component.Name, "installed": f.Component.Version, "purl": f.Component.PURL, "fixed": m.Fixed}
		if len(f.Runs) > 0 {
			props["runs"] = f.Runs
		}
		run.Results = append(run.Results, sarifResult{
			RuleID:     m.ID,
			Level:      sarifLevel(fmt.Sprint(m.Severity)),
			Message:    sarifText{fmt.Sprintf("%s %s in %s (%s) of package %s %s: %s (fixed: %s)", f.Component.Name, f.Component.Version, f.Image, f.Platform, f.Package, f.Version, m.ID, fixed)},
			Locations:  []sarifLocation{loc},
			Properties: props,
		})
	}
	slices.SortFunc(run.Tool.Driver.Rules, func(a, b sarifRule) int { return strings.Compare(a.ID, b.ID) })
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{Schema: "https://json.schemastore.org/sarif-2.1.0.json", Version: "2.1.0", Runs: []sarifRun{run}})
}

// sarifLevel is SARIF's level of an advisory's severity: error for high
// and critical ones, warning otherwise.
func sarifLevel(severity string) string {
	s := strings.ToUpper(severity)
	if strings.Contains(s, "CRITICAL") || strings.Contains(s, "HIGH") {
		return "error"
	}
	return "warning"
}
