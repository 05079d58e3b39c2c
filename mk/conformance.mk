# conformance: OCI distribution-spec suite against `ferry registry serve` and
# Debian's docker-registry (distribution 2.8); prints a workflow × registry
# table and fails when any check against ferry's registry fails.
# bench-registry: blob GET throughput of ferry's registry vs docker-registry 2.8.

.PHONY: conformance bench-registry

TEST_TARGETS  += conformance
BENCH_TARGETS += bench-registry

CONFORMANCE_OUT ?= $(CURDIR)/out/conformance

conformance: build
	FERRY_REQUIRE_TOOLS=1 FERRY_CONFORMANCE_MATRIX=1 FERRY_BIN=$(BIN)/ferry FERRY_CONFORMANCE_OUT=$(CONFORMANCE_OUT) \
	  $(GO) test -count=1 -run '^TestRegistryMatrix$$' -v ./conformance | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$$'; \
	  exit $${PIPESTATUS[0]}

bench-registry:
	FERRY_REQUIRE_TOOLS=1 $(GO) test -count=1 -run '^$$' -bench '^BenchmarkBlobGet' -benchtime 20x ./registry | tee /dev/stderr | \
	  awk '/BenchmarkBlobGet\/ferry/ {f=$$(NF-1)} /BenchmarkBlobGet\/distribution-2.8/ {d=$$(NF-1)} \
	  END { if (f=="" || d=="") { print "bench-registry: missing results"; exit 1 } \
	        r=f/d; printf "registry blob GET throughput: ferry %.0f MB/s, distribution 2.8 %.0f MB/s, ratio %.2f (budget >= 0.90)\n", f, d, r; \
	        if (r < 0.9) exit 1 }'
