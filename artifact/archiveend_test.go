package artifact_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ferrypkg/ferry/artifact"
	"github.com/ferrypkg/ferry/registry/registrytest"
)

// zstdOf is data compressed as one zstd frame.
func zstdOf(t testing.TB, data []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

// skippableFrame is a zstd skippable frame holding data.
func skippableFrame(data []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0x184d2a50)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// TestArchiveTrailingBytes: bytes after a package archive's tar end
// marker — other bytes, more zeros than a tar's padding, a zstd frame of
// them, a skippable frame, a terabyte of sparse zeros — are refused by
// inspect, verify and push, in one line, at once, and nothing is tagged;
// a tar's record padding (zeros) passes.
func TestArchiveTrailingBytes(t *testing.T) {
	ctx := context.Background()
	sk, pk := keyPair(t, t.TempDir(), "k")
	host := registrytest.New(t)
	for _, ext := range []string{".tar", ".tar.zst"} {
		res := smallPackage(t, filepath.Join(t.TempDir(), "small"+ext), 64<<10)
		if _, err := artifact.Sign(ctx, openPkg(t, res.Path), "", sk, artifact.SignOptions{}); err != nil {
			t.Fatal(err)
		}
		whole, err := os.ReadFile(res.Path)
		if err != nil {
			t.Fatal(err)
		}
		hidden := []byte("not part of the package: nothing signs these bytes")
		zeros := func(n int) []byte { return make([]byte, n) }
		type variant struct {
			name   string
			tail   []byte
			sparse int64 // zeros appended by growing the file
			ok     bool
		}
		variants := []variant{
			// After a .tar.zst's last frame, zeros are not zstd.
			{name: "tar record padding", tail: zeros(9 << 10), ok: ext == ".tar"},
			{name: "other bytes", tail: hidden},
			{name: "more zeros than a record", tail: zeros(artifact.MaxTarPadding + 512)},
			{name: "a terabyte of sparse zeros", sparse: 1 << 40},
		}
		if ext == ".tar.zst" {
			variants = append(variants,
				variant{name: "a zstd frame of record padding", tail: zstdOf(t, zeros(9<<10)), ok: true},
				variant{name: "a zstd frame of other bytes", tail: zstdOf(t, hidden)},
				variant{name: "a zstd frame of 64 MiB of zeros", tail: zstdOf(t, zeros(64<<20))},
				variant{name: "a skippable frame", tail: skippableFrame(hidden)},
			)
		}
		for _, v := range variants {
			t.Run(ext+"/"+v.name, func(t *testing.T) {
				p := filepath.Join(t.TempDir(), "trailing"+ext)
				if err := os.WriteFile(p, append(bytes.Clone(whole), v.tail...), 0o644); err != nil {
					t.Fatal(err)
				}
				if v.sparse > 0 {
					if err := os.Truncate(p, int64(len(whole))+v.sparse); err != nil {
						t.Fatal(err)
					}
				}
				start := time.Now()
				r, err := artifact.Open(ctx, p)
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				_, inspectErr := artifact.Inspect(ctx, r, "", nil)
				_, verifyErr := artifact.Verify(ctx, r, "", artifact.VerifyOptions{Keys: []artifact.Verifier{pk}})
				// A repository of its own: one holding the package already
				// would only be tagged, nothing read from the archive.
				ref := host + "/" + strings.ReplaceAll(strings.TrimPrefix(ext, "."), ".", "-") + "/" + strings.ToLower(strings.ReplaceAll(v.name, " ", "-")) + ":1"
				_, pushErr := artifact.Push(ctx, r, ref, artifact.PushOptions{})
				took := time.Since(start)
				for what, err := range map[string]error{"inspect": inspectErr, "verify": verifyErr, "push": pushErr} {
					if v.ok {
						if err != nil {
							t.Errorf("%s: %v", what, err)
						}
						continue
					}
					if !errors.Is(err, artifact.ErrCorrupt) || !strings.Contains(err.Error(), "the archive's end") || !strings.Contains(err.Error(), p) || strings.Contains(err.Error(), "\n") {
						t.Errorf("%s: %v; want one line naming %s and what follows the archive's end", what, err, filepath.Base(p))
					}
				}
				if !v.ok {
					if _, err := remoteRepo(t, ref).Resolve(ctx, "1"); err == nil {
						t.Error("tagged after a refused push")
					}
					if took > 5*time.Second {
						t.Errorf("refused in %s", took)
					}
				}
				t.Logf("%s: inspect, verify and push in %s: %v", v.name, took.Round(time.Millisecond), inspectErr)
			})
		}
	}
}
