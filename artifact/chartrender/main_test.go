package chartrender_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/ferrypkg/ferry/artifact/chartrender"
)

// TestMain: run with chartrender.ChildArg, the test binary is the child of
// the tests' Limited renderers, as ferry-full is ferry's.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == chartrender.ChildArg {
		out := os.Stdout
		os.Stdout = os.Stderr // the answers' pipe is the renderer's alone
		if err := chartrender.ServeChild(os.Stdin, out); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	code := m.Run()
	limited.Close()
	os.Exit(code)
}
