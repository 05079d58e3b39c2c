# conformance: OCI distribution-spec suite against `ferry registry serve` (on
# the filesystem, on S3 — MinIO from .bin/ on loopback — and two serve
# processes on one bucket behind a round-robin proxy) and Debian's
# docker-registry (distribution 2.8); prints a workflow × registry table and
# fails when any check against ferry's registry fails.
# bench-registry: blob GET throughput of ferry's registry vs docker-registry 2.8.

.PHONY: conformance bench-registry

TEST_TARGETS  += conformance
BENCH_TARGETS += bench-registry

CONFORMANCE_OUT ?= $(CURDIR)/out/conformance

conformance: build
	FERRY_REQUIRE_TOOLS=1 FERRY_CONFORMANCE_MATRIX=1 FERRY_BIN=$(BIN)/ferry FERRY_CONFORMANCE_OUT=$(CONFORMANCE_OUT) \
	  $(GO) test -count=1 -run '^TestRegistryMatrix$$' -v ./conformance | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$$'; \
	  exit $${PIPESTATUS[0]}

bench-registry: build
	FERRY_REQUIRE_TOOLS=1 FERRY_BIN=$(BIN)/ferry $(GO) test -count=1 -run '^$$' -bench '^BenchmarkBlobGetRatio$$' -benchtime 40x ./registry | tee /dev/stderr | \
	  awk '/^BenchmarkBlobGetRatio/ { for (i = 2; i <= NF; i++) { if ($$i == "ferry-MB/s") f = $$(i-1); if ($$i == "dist28-MB/s") d = $$(i-1); if ($$i == "ratio") r = $$(i-1) } } \
	  END { if (r == "") { print "bench-registry: no result"; exit 1 } \
	        printf "registry blob GET throughput (median of alternating GETs, 64 MiB blob): ferry %s MB/s, distribution 2.8 %s MB/s, ratio %s (budget >= 0.90)\n", f, d, r; \
	        if (r + 0 < 0.9) exit 1 }'

# upstream-conformance (issue 28): the OCI distribution-spec conformance suite
# itself (github.com/opencontainers/distribution-spec/conformance), of the v1.1
# release line and the newest main, both from the module proxy, against `ferry registry serve` on the
# filesystem and on S3 (MinIO from .bin/ on loopback), every workflow on;
# prints a suite × storage table of counts and fails on any failed test.
# Each suite is built from a module of its own under tools/oci-conformance/
# (never the main go.mod) and cached in .bin/ until its go.mod or go.sum
# changes: v1.1 is a Ginkgo test package (go test -c of the required
# package); main is a program (go build, as its README says). The proxy serves
# no version of the v1.1.1 tag's commit: v1.1 is its newest of that line
# (2023-11-01), and main holds every check of v1.1.1 and more.

.PHONY: upstream-conformance

TEST_TARGETS += upstream-conformance

OCI_CONFORMANCE_V11 := $(TOOLS)/oci-conformance-v1.1.test
OCI_CONFORMANCE_MAIN := $(TOOLS)/oci-conformance-main

$(OCI_CONFORMANCE_V11): tools/oci-conformance/v1.1/go.mod tools/oci-conformance/v1.1/go.sum
	cd tools/oci-conformance/v1.1 && $(GO) test -c -trimpath -o $@ github.com/opencontainers/distribution-spec/conformance

$(OCI_CONFORMANCE_MAIN): tools/oci-conformance/main/go.mod tools/oci-conformance/main/go.sum
	cd tools/oci-conformance/main && $(GO) build -trimpath -o $@ github.com/opencontainers/distribution-spec/conformance

upstream-conformance: build $(OCI_CONFORMANCE_V11) $(OCI_CONFORMANCE_MAIN)
	FERRY_REQUIRE_TOOLS=1 FERRY_UPSTREAM_CONFORMANCE=1 FERRY_BIN=$(BIN)/ferry FERRY_CONFORMANCE_OUT=$(CONFORMANCE_OUT) \
	  FERRY_OCI_CONFORMANCE_V1_1=$(OCI_CONFORMANCE_V11) FERRY_OCI_CONFORMANCE_MAIN=$(OCI_CONFORMANCE_MAIN) \
	  $(GO) test -count=1 -timeout 30m -run '^TestUpstreamConformance$$' -v ./conformance | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$$'; \
	  exit $${PIPESTATUS[0]}
