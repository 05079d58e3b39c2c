package artifact

import (
	"time"

	"github.com/ferrypkg/ferry/artifact/internal/zstdframe"
)

// Limits on what ferry reads from a package, whatever its source (archive,
// layout folder, registry). Real packages stay far below each of them; a
// package over one is refused with ErrCorrupt, as early as the limit can be
// known, so that hostile input costs little memory and time. The README's
// verification section lists them.
const (
	// MaxManifestSize bounds one manifest or index, ferry.json, index.json
	// and oci-layout (4 MiB, distribution's own limit for manifests).
	MaxManifestSize = 4 << 20

	// MaxGraphSize bounds the manifests, indexes and signature payloads of
	// one package held in memory together for the graph check (32 MiB; a
	// package of 1,000 multi-platform images needs about 5 MiB). Other
	// blobs are never held.
	MaxGraphSize = 32 << 20

	// MaxBlobs bounds the number of blobs in one package (100,000).
	MaxBlobs = 100_000

	// MaxSignatures bounds the signatures stored over one package root
	// (256), MaxSignaturePayload the size of one signature's payload
	// (64 KiB; cosign's are about 300 bytes).
	MaxSignatures       = 256
	MaxSignaturePayload = 64 << 10

	// MaxZstdWindow bounds the window a .tar.zst frame may declare, which
	// is the memory its decoder needs (8 MiB: what zstd levels 1 to 19
	// use; ferry writes 4 MiB; --ultra and --long archives are refused).
	MaxZstdWindow = zstdframe.MaxWindow

	// MaxExpansion bounds how many times its compressed size a .tar.zst may
	// expand to, counted from the start of the archive, once it has given
	// more than expansionFloor bytes (a zstd bomb: 269 KB to 8 GiB is
	// 31,000×; a real package's JSON, YAML and uncompressed layers give 2–20×,
	// and its gzip layers 1×). The sizes ferry.json records, shared blobs
	// counted each time, may add up to at most this many times the archive's
	// size too.
	MaxExpansion = zstdframe.MaxExpansion

	// MaxChartSize bounds a chart archive (.tgz) put into a package: it is
	// held in memory (64 MiB; Helm's loader refuses a chart that expands past 100 MiB).
	MaxChartSize = 64 << 20

	// MaxManifestBundleSize bounds one manifests entry of a definition, its
	// YAML files together (64 MiB; the largest CRD bundles are a few MiB).
	// The bundle is held in memory by create and deploy.
	MaxManifestBundleSize = 64 << 20

	// MaxManifestNodes bounds the YAML nodes one manifest file may make,
	// judged from its text before it is parsed (internal/yamlbound):
	// 2,000,000, some 400 MiB of parse at worst; the largest CRD files
	// (a few MiB) make under a million.
	MaxManifestNodes = 2_000_000

	// MaxManifestFiles bounds the files one manifests entry of a
	// definition joins (10,000; each is named in ferry.json, which must
	// stay under MaxManifestSize).
	MaxManifestFiles = 10_000
)

// Limits on a git repository carried in a package (create, artifact/gitrepo).
// A repository comes from a URL or a folder nobody vetted; one over a limit is
// refused in one line naming it. The README's limits table lists them.
const (
	// MaxGitPath bounds a path in a repository's tree (4,096 bytes: Linux's
	// PATH_MAX, past which no checkout can write it), and with it the
	// tree's depth (2,048) and the size of the tar that carries it.
	MaxGitPath = 4096
	// MaxGitName bounds one name in a tree (255 bytes: NAME_MAX).
	MaxGitName = 255
	// MaxGitEntries bounds the files and folders of one tree (1,000,000;
	// the Linux kernel has about 90,000, Chromium about 450,000).
	MaxGitEntries = 1_000_000
	// GitExpansionFloor is how many bytes the files of a tree may add up to
	// past twice the bytes of its distinct contents (64 MiB): a repository
	// naming the same content under many paths — copies of a license, empty
	// files — passes, a git bomb (one large blob under a million paths)
	// does not.
	GitExpansionFloor = 64 << 20
	// MaxGitRefList bounds what a git server may send before the pack:
	// its list of refs (the advertisement of info/refs, or protocol v2's
	// ls-refs answer), 32 MiB — about 500,000 refs. Chromium, among the
	// largest, lists about 100,000 refs in some 10 MiB; the Linux kernel
	// about 1,500. A larger list is refused, never held whole.
	MaxGitRefList = 32 << 20
)

// Limits on the SBOM helper (ferry-sbom, Syft), which create runs on every
// image platform it keeps: images come from registries nobody here
// controls, and one hostile image (a dpkg database listing 200,000
// packages, a 1.5 GiB MANIFEST.MF, nested archives) must cost a refusal in
// one line naming the image, not the machine. Package artifact/sbomexec
// enforces them from outside the helper, which is killed when it passes one.
const (
	// SBOMHelperMemory bounds the helper's memory (1 GiB): its heap
	// (RLIMIT_DATA, on Linux) and its resident set, polled. Syft needs
	// 100-350 MiB for real images.
	SBOMHelperMemory = 1 << 30
	// SBOMHelperTimeout bounds one run of the helper (5 min; real images
	// take 1-30 s).
	SBOMHelperTimeout = 5 * time.Minute
	// SBOMHelperDiskFloor and SBOMHelperDiskFactor bound what the helper
	// writes (its temporary files: unpacked layers, extracted archives):
	// at most the floor (1 GiB) plus the factor (10) times the image's
	// layers, compressed — more than any image unpacks to.
	SBOMHelperDiskFloor  = 1 << 30
	SBOMHelperDiskFactor = 10
)

// Limits on time: what a reader does is bounded by what it reads, never by
// what a file or a registry claims. Each refusal is one line naming what
// is over.
const (
	// MaxListPages bounds the pages one listing of a registry is followed
	// for — its repositories, a repository's tags, a manifest's referrers
	// (1,000: MaxListEntries names come in 100 pages of the 1,000 a
	// distribution registry answers, or in 1,000 of 100). See
	// ListRepositories.
	MaxListPages = 1000
	// MaxListEntries bounds the entries of one listing (100,000, as many
	// as a package may have blobs).
	MaxListEntries = 100_000

	// MaxTarPadding bounds the bytes that may follow a tar's end marker (its
	// two zero blocks), all zeros (1 MiB: tar pads its last record, 10 KiB
	// by default, 1 MiB at the largest blocking factor GNU tar takes).
	// Anything else after the end — other bytes, more zeros, a zstd
	// skippable frame — travels with the package yet is no part of it, and
	// is refused.
	MaxTarPadding = 1 << 20

	// archiveEntryOverhead bounds what an archive spends on one entry
	// besides its data (2 KiB: a tar header of 512 bytes, padding to 512,
	// extended headers, zstd frame headers); see archiveSizeLimit.
	archiveEntryOverhead = 2 << 10
)

// archiveSizeLimit is the most bytes the archive of a package whose
// ferry.json is cfg (n bytes) can take: its head and blobs (sizeBudget, and
// ferry-delta.json), an entry's overhead for each of at most MaxBlobs, the
// end and its padding, and zstd's framing (3 bytes every 128 KiB). Parts
// adding up to more are refused before anything is hashed.
func archiveSizeLimit(cfg *Config, n int) int64 {
	b := min(sizeBudget(cfg, n)+2*MaxManifestSize, sizeCeiling)
	return min(b+b/1024+(MaxBlobs+8)*archiveEntryOverhead+MaxTarPadding+1024, sizeCeiling)
}

// headSizeLimit bounds the bytes that hold an archive's head (ferry.json,
// oci-layout, index.json, ferry-delta.json): what a read that failed there
// may have needed.
const headSizeLimit = 4*MaxManifestSize + 4*archiveEntryOverhead
