package inject

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/injector"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func tinyLayout() fstest.MapFS {
	blob := []byte("hello ferry")
	return fstest.MapFS{
		"oci-layout": {Data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		"index.json": {Data: []byte(`{"schemaVersion":2,"manifests":[]}`)},
		"blobs/sha256/" + digest.FromBytes(blob).Encoded(): {Data: blob},
	}
}

func goldenOptions(t *testing.T) Options {
	p, err := NewPayload(tinyLayout())
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		NodeName:         "node-1",
		Image:            "registry.k8s.io/pause:3.10",
		Arch:             "amd64",
		Stage1:           bytes.Repeat([]byte("stage-1 "), 200),
		Payload:          p,
		ChunkSize:        1024,
		MaxConfigMapSize: 3000,
	}
}

func TestPlanGolden(t *testing.T) {
	plan, err := NewPlan(goldenOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := plan.YAML()
	if err != nil {
		t.Fatal(err)
	}
	again, _ := NewPlan(goldenOptions(t))
	if b, _ := again.YAML(); !bytes.Equal(b, got) {
		t.Fatal("two plans from the same options differ")
	}
	golden := filepath.Join("testdata", "plan.golden.yaml")
	if *update {
		os.WriteFile(golden, got, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("rendered plan differs from %s (go test ./inject -run Golden -update, then review the diff):\n%s", golden, got)
	}
}

func TestPlanLimits(t *testing.T) {
	opts := goldenOptions(t)
	opts.Payload.Data = bytes.Repeat([]byte{7}, 5<<20)
	opts.Payload.Digest = digest.FromBytes(opts.Payload.Data)
	opts.Stage1 = bytes.Repeat([]byte{1}, 2900<<10)
	for _, tc := range []struct{ chunk, max int }{{0, 0}, {100 << 10, 0}, {300 << 10, 0}, {1000 << 10, 0}} {
		opts.ChunkSize, opts.MaxConfigMapSize = tc.chunk, tc.max
		plan, err := NewPlan(opts)
		if err != nil {
			t.Fatal(err)
		}
		var joined []byte
		for i := range plan.ConfigMaps {
			cm := &plan.ConfigMaps[i]
			if n := ConfigMapSize(cm); n > DefaultMaxConfigMapSize {
				t.Errorf("chunk %d: %s is %d bytes", tc.chunk, cm.Name, n)
			}
		}
		for i := range plan.PayloadChunks {
			for _, cm := range plan.ConfigMaps {
				if b, ok := cm.BinaryData[injector.ChunkName(injector.DefaultChunkPrefix, i)]; ok {
					joined = append(joined, b...)
				}
			}
		}
		if !bytes.Equal(joined, opts.Payload.Data) {
			t.Errorf("chunk %d: chunks do not join to the payload", tc.chunk)
		}
		t.Logf("chunk %7d: %d ConfigMaps, %d stage-1 and %d payload chunks", tc.chunk, len(plan.ConfigMaps), plan.Stage1Chunks, plan.PayloadChunks)
	}
	opts.ChunkSize = 2 << 20
	if _, err := NewPlan(opts); err == nil || !strings.Contains(err.Error(), "lower the chunk size") {
		t.Fatalf("oversized chunk: %v", err)
	}
	for name, mutate := range map[string]func(*Options){
		"no node":     func(o *Options) { o.NodeName = "" },
		"no image":    func(o *Options) { o.Image = "" },
		"bad arch":    func(o *Options) { o.Arch = "s390x" },
		"no stage 1":  func(o *Options) { o.Stage1 = nil },
		"bad payload": func(o *Options) { o.Payload.Data = []byte("x") },
	} {
		o := goldenOptions(t)
		mutate(&o)
		if _, err := NewPlan(o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestPayload(t *testing.T) {
	fsys := tinyLayout()
	a, err := NewPayload(fsys)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPayload(fsys)
	if a.Digest != b.Digest || a.Digest != digest.FromBytes(a.Data) {
		t.Fatal("payload is not reproducible")
	}
	fsys["blobs/sha256/"+strings.Repeat("0", 64)] = &fstest.MapFile{Data: []byte("tampered")}
	if _, err := NewPayload(fsys); err == nil || !strings.Contains(err.Error(), "sha256:"+strings.Repeat("0", 64)) {
		t.Fatalf("tampered blob: %v", err)
	}
	if _, err := NewPayload(fstest.MapFS{"index.json": {Data: []byte("{}")}}); err == nil || !strings.Contains(err.Error(), "oci-layout is missing") {
		t.Fatalf("no oci-layout: %v", err)
	}
}
