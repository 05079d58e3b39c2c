package artifact_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrypkg/ferry/artifact"
)

// TestPushPullRoundTrip: create → push → pull gives the same bytes, for
// both archive formats, by tag and by digest; a second push sends nothing.
func TestPushPullRoundTrip(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	for _, ext := range []string{".tar.zst", ".tar"} {
		t.Run(ext, func(t *testing.T) {
			dir := t.TempDir()
			res := create(t, w, filepath.Join(dir, "demo"+ext))
			r, err := artifact.Open(ctx, res.Path)
			if err != nil {
				t.Fatal(err)
			}
			ref := w.Host + "/pkgs/demo:1.0.0"
			pr, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			if pr.Root.Digest != res.Root.Digest || pr.Pushed+pr.Skipped != res.Blobs {
				t.Errorf("push result %+v, want root %s and %d blobs", pr, res.Root.Digest, res.Blobs)
			}
			want, _ := os.ReadFile(res.Path)
			for _, from := range []string{ref, w.Host + "/pkgs/demo@" + res.Root.Digest.String()} {
				out := filepath.Join(t.TempDir(), "pulled"+ext)
				pl, err := artifact.Pull(ctx, from, out, artifact.PullOptions{})
				if err != nil {
					t.Fatalf("pull %s: %v", from, err)
				}
				got, _ := os.ReadFile(out)
				if !bytes.Equal(got, want) || pl.Root.Digest != res.Root.Digest {
					t.Fatalf("pull %s: %d bytes root %s, pushed %d bytes root %s", from, len(got), pl.Root.Digest, len(want), res.Root.Digest)
				}
			}
			again, err := artifact.Push(ctx, r, ref, artifact.PushOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if again.Pushed != 0 || again.BytesPushed != 0 {
				t.Errorf("second push uploaded %d blobs (%d bytes), want 0", again.Pushed, again.BytesPushed)
			}
			rep, err := artifact.InspectRemote(ctx, ref, artifact.RemoteOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Root != res.Root.Digest || rep.Blobs != res.Blobs || rep.Name != "demo" {
				t.Errorf("remote inspect: root %s blobs %d", rep.Root, rep.Blobs)
			}
		})
	}
}
