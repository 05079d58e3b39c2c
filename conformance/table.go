package conformance

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteResults writes one line per check of r: status, ID, spec section and
// detail, aligned for a terminal.
func WriteResults(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tSPEC\tDETAIL")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.ToUpper(string(res.Status)), res.ID, res.Spec, res.Detail)
	}
	return tw.Flush()
}

// WriteMatrix writes a workflow × registry table of passed/failed/skipped
// counts, one column per named report.
func WriteMatrix(w io.Writer, names []string, reports []Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "WORKFLOW")
	for _, n := range names {
		fmt.Fprintf(tw, "\t%s", n)
	}
	fmt.Fprintln(tw)
	for _, wf := range Workflows {
		fmt.Fprint(tw, wf)
		for _, r := range reports {
			c := r.ByWorkflow()[wf]
			fmt.Fprintf(tw, "\t%s", c)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprint(tw, "total")
	for _, r := range reports {
		fmt.Fprintf(tw, "\t%s", r.Total())
	}
	fmt.Fprintln(tw)
	return tw.Flush()
}

// String renders counts as "12 passed, 1 failed, 0 skipped".
func (c Counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.Passed, c.Failed, c.Skipped)
}
