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
