package conformance_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/ferrypkg/ferry/conformance"
	"github.com/ferrypkg/ferry/registry"
)

// ExampleRun checks what a ferry package needs from a registry, here ferry's
// own embedded registry.
func ExampleRun() {
	ctx := context.Background()
	srv, err := registry.New(ctx, registry.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown(ctx)
	ts := httptest.NewServer(srv)
	defer ts.Close()

	rep, err := conformance.Run(ctx, conformance.Config{URL: ts.URL, Checks: conformance.Profile})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Total())
	// Output: 13 passed, 0 failed, 0 skipped
}
