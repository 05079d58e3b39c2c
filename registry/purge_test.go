package registry_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/registry"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// TestPurgeUploads: an upload session nothing wrote to since the purge's
// time is removed (a PATCH to it then finds no session), one written to
// after it is kept and still completes, on both drivers.
func TestPurgeUploads(t *testing.T) {
	forEachStorage(t, func(t *testing.T, cfg registry.Config) {
		base := registrytest.NewServer(t, cfg).URL
		chunk := bytes.Repeat([]byte("upload "), 1<<20) // 7 MiB: a part of its own on S3
		patch := func(loc string, data []byte) *http.Response {
			req, _ := http.NewRequest(http.MethodPatch, base+loc, bytes.NewReader(data))
			req.Header.Set("Content-Type", "application/octet-stream")
			resp, _ := send(t, req)
			return resp
		}
		abandoned := openUpload(t, base, "app", "")
		if resp := patch(abandoned, chunk); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("PATCH: %s", resp.Status)
		}
		time.Sleep(1100 * time.Millisecond) // S3 times are to the second
		cut := time.Now()
		time.Sleep(1100 * time.Millisecond)
		live := openUpload(t, base, "app/sub", "")
		resp := patch(live, chunk)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("PATCH: %s", resp.Status)
		}
		liveNext := resp.Header.Get("Location")

		res, err := registry.PurgeUploads(context.Background(), cfg, cut)
		if err != nil {
			t.Fatal(err)
		}
		if res.Sessions != 1 || res.Bytes < int64(len(chunk)) {
			t.Fatalf("purged %+v, want the one idle session of at least %d bytes", res, len(chunk))
		}
		if resp := patch(abandoned, chunk); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("PATCH to the purged session: %s, want 404 BLOB_UPLOAD_UNKNOWN", resp.Status)
		}
		d := digest.FromBytes(chunk)
		resp, body := call(t, http.MethodPut, fmt.Sprintf("%s&digest=%s", liveNext, d), "", nil)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("completing the kept session: %s %s", resp.Status, body)
		}
	})
}
