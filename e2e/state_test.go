package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/deploy/rollout"
	"github.com/ferrypkg/ferry/e2e/internal/harness"
)

// TestDeployState records packages in the real API server, lists them back,
// derives the agent's rewrites from them and forgets one. Records are the
// controller's state: `ferry list` shows Packages, so none here.
func TestDeployState(t *testing.T) {
	c := harness.Get(t)
	ctx := timeout(t, 2*time.Minute)
	ns := c.Namespace(t)
	st := &rollout.State{Client: c.Client, Namespace: ns}
	stored := digest.FromString("stored")
	for _, r := range []*rollout.Record{
		{Name: "web", Version: "1.0.0", Root: digest.FromString("root web"), Components: []string{"app"},
			Config: &artifact.Config{Name: "web", Version: "1.0.0", Components: []artifact.Component{{Name: "app", Images: []artifact.Image{{Ref: "docker.io/library/app:1.0", Digest: stored}}}}}},
		{Name: "db", Version: "2.3.4", Root: digest.FromString("root db"), Components: []string{"db"}, Config: &artifact.Config{Name: "db", Version: "2.3.4"}},
	} {
		if err := st.Save(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Saving again replaces.
	if err := st.Save(ctx, &rollout.Record{Name: "db", Version: "2.4.0", Root: digest.FromString("root db 2"), Config: &artifact.Config{Name: "db", Version: "2.4.0"}}); err != nil {
		t.Fatal(err)
	}
	recs, err := st.List(ctx)
	if err != nil || len(recs) != 2 || recs[0].Name != "db" || recs[0].Version != "2.4.0" || recs[1].Name != "web" {
		t.Fatalf("list: %+v %v", recs, err)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(binDir(t), "ferry"), "list", "--kubeconfig", c.Kubeconfig, "-n", ns, "-o", "json").Output()
	if err != nil {
		t.Fatalf("ferry list: %v: %s", err, exitStderr(err))
	}
	var listed []rollout.Record
	if err := json.Unmarshal(out, &listed); err != nil || len(listed) != 0 {
		t.Fatalf("ferry list printed %s (%v)", out, err)
	}
	images, err := st.Images(ctx)
	if err != nil || images["docker.io/library/app:1.0"].Digest != stored {
		t.Fatalf("agent images %v: %v", images, err)
	}
	if err := st.Delete(ctx, "db"); err != nil {
		t.Fatal(err)
	}
	if recs, _ := st.List(ctx); len(recs) != 1 || recs[0].Name != "web" {
		t.Fatalf("after delete: %+v", recs)
	}
}
