package injector_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/ferrypkg/ferry/injector"
)

// Example starts the injector's registry on an OCI layout directory, as a
// test (or the conformance suite) would.
func Example() {
	dir, _ := os.MkdirTemp("", "layout")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"schemaVersion":2,"manifests":[]}`), 0o644)

	srv, err := injector.NewServer(dir)
	if err != nil {
		panic(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	resp, err := http.Get("http://" + ln.Addr().String() + "/v2/")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Docker-Distribution-API-Version"))
	// Output: 200 OK registry/2.0
}

func ExampleChunkName() {
	fmt.Println(injector.ChunkName(injector.DefaultChunkPrefix, 7))
	// Output: payload-00007
}
