package artifact_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ferrypkg/ferry/artifact"
)

func ExampleDelta() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	r, err := artifact.Open(ctx, examplePackage(dir))
	if err != nil {
		log.Fatal(err)
	}
	// What the far side holds: here, this very package (a receipt of a
	// registry comes from HaveRegistry).
	have, err := artifact.Have(ctx, r, "")
	if err != nil {
		log.Fatal(err)
	}
	// The root, the package manifest and ferry.json always travel.
	res, err := artifact.Delta(ctx, r, have, filepath.Join(dir, "update.tar.zst"), artifact.DeltaOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(have.Blobs), "held;", res.Carried, "carried,", res.Omitted, "left out")
	// Output: 5 held; 3 carried, 2 left out
}
