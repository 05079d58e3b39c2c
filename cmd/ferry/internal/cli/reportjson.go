package cli

import (
	"fmt"

	"github.com/ferrypkg/ferry/artifact"
)

// The -o json views of a package report. They are artifact's types with one
// change: a file's mode is the octal string ("0644"), not the decimal
// number ferry.json stores (420), whose bytes stay as they are since every
// package digest covers them.

type fileJSON struct {
	artifact.File
	Mode string `json:"mode"`
}

type componentJSON struct {
	artifact.Component
	Files []fileJSON `json:"files,omitempty"`
}

type reportJSON struct {
	*artifact.Report
	Components []componentJSON `json:"components"`
}

type verifyJSON struct {
	*artifact.VerifyResult
	Report reportJSON `json:"package"`
}

// newReportJSON is rep as -o json prints it.
func newReportJSON(rep *artifact.Report) reportJSON {
	v := reportJSON{Report: rep, Components: []componentJSON{}}
	for _, c := range rep.Components {
		cj := componentJSON{Component: c}
		for _, f := range c.Files {
			cj.Files = append(cj.Files, fileJSON{File: f, Mode: fmt.Sprintf("%04o", f.Mode)})
		}
		v.Components = append(v.Components, cj)
	}
	return v
}

// newVerifyJSON is res as -o json prints it.
func newVerifyJSON(res *artifact.VerifyResult) verifyJSON {
	return verifyJSON{VerifyResult: res, Report: newReportJSON(res.Report)}
}
