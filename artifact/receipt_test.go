package artifact_test

import (
	"context"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestReceiptOfOneRepository: HaveRepository lists what one repository
// holds and no other, not even one under it (app/tools under app), which
// HaveRegistry's prefix takes; a repository the registry does not hold has
// an empty receipt.
func TestReceiptOfOneRepository(t *testing.T) {
	ctx := context.Background()
	pair := makeDeltaPair(t, 4<<10, nil)
	host := registrytest.New(t)
	for ref, path := range map[string]string{"app:1.0.0": pair.V1, "app/tools:2.0.0": pair.V2} {
		if _, err := artifact.Push(ctx, openPkg(t, path), host+"/"+ref, artifact.PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	v1, v2 := have(t, pair.V1), have(t, pair.V2)
	reg := registryOf(t, host)

	one, err := artifact.HaveRepository(ctx, reg, host+"/app", "app")
	if err != nil {
		t.Fatal(err)
	}
	if !equalKeys(one.Blobs, v1.Blobs) {
		t.Errorf("the receipt of app lists %d blobs, app's package %d", len(one.Blobs), len(v1.Blobs))
	}
	under, err := artifact.HaveRegistry(ctx, reg, host+"/app", "app")
	if err != nil {
		t.Fatal(err)
	}
	onlyTools := 0
	for d := range v2.Blobs {
		if _, ok := v1.Blobs[d]; ok {
			continue
		}
		onlyTools++
		if _, ok := one.Blobs[d]; ok {
			t.Errorf("the receipt of app lists %s, held only in app/tools", d)
		}
		if _, ok := under.Blobs[d]; !ok {
			t.Errorf("the receipt of prefix app lacks %s of app/tools", d)
		}
	}
	if onlyTools == 0 {
		t.Fatal("app/tools holds no blob app lacks: the test tests nothing")
	}
	t.Logf("app: %d blobs; prefix app: %d blobs (%d held only in app/tools)", len(one.Blobs), len(under.Blobs), onlyTools)

	none, err := artifact.HaveRepository(ctx, reg, host+"/ap", "ap")
	if err != nil || len(none.Blobs) != 0 {
		t.Errorf("the receipt of a repository the registry does not hold: %d blobs, %v", len(none.Blobs), err)
	}
}
