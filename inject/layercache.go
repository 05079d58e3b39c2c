package inject

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/ferrypkg/ferry/internal/confine"
	"github.com/ferrypkg/ferry/internal/scratch"
)

// The registry image is the same bytes for the same ferry, and compressing
// its layer at gzip's best compression was most of ferry init's first step
// (docs/performance.md) — done again when init pushes the image into the
// registry. So the compressed layer is kept in the user's cache folder,
// filed under its uncompressed digest and the Go release that compressed it
// (same release, same bytes, same image digest), and used only when it
// decompresses to that digest: a damaged or planted file is compressed
// again, never trusted because of where it is.

// layerCacheDir is where compressed layers are kept: $FERRY_CACHE_DIR/layers,
// else <user cache folder>/ferry/layers; "" when there is none.
func layerCacheDir() string {
	base := os.Getenv("FERRY_CACHE_DIR")
	if base == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(dir, "ferry")
	}
	return filepath.Join(base, "layers")
}

// gzipLayer returns the layer's tar stream (uncompressed digest diffID) at
// gzip's best compression, from the cache when it holds it.
func gzipLayer(layer *tarLayer, diffID digest.Digest) ([]byte, error) {
	dir := layerCacheDir()
	name := ""
	if dir != "" {
		name = filepath.Join(dir, diffID.Encoded()+"-"+strings.ReplaceAll(runtime.Version(), " ", "_")+".tar.gz")
		// gzip at its best level never grows a stream by more than a few
		// bytes per 16 KiB block: a larger file is not the layer's, and is
		// not read whole.
		if gz, err := confine.ReadPath(name, layer.len()+layer.len()/100+64<<10); err == nil && gunzipsTo(gz, diffID) {
			return gz, nil
		}
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err := layer.writeTo(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if name != "" {
		keepLayer(dir, name, buf.Bytes())
	}
	return buf.Bytes(), nil
}

// gunzipsTo reports whether gz decompresses to content of digest d.
func gunzipsTo(gz []byte, d digest.Digest) bool {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return false
	}
	v := d.Verifier()
	if _, err := io.Copy(v, zr); err != nil {
		return false
	}
	return zr.Close() == nil && v.Verified()
}

// keepLayer writes gz to name in dir, atomically; failures only mean the
// next run compresses again.
func keepLayer(dir, name string, gz []byte) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := scratch.CreateTemp(dir, "layer-")
	if err != nil {
		return
	}
	defer os.Remove(f.Name())
	_, err = f.Write(gz)
	if cerr := f.Close(); err == nil && cerr == nil {
		_ = os.Rename(f.Name(), name)
	}
}
