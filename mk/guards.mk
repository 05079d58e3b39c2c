# Input budgets (issue 28) measured on inputs as large and hostile as the
# issue's: create of a repository holding a 3 GiB file (peak RSS ≤ 150 MiB),
# and the SBOM helper on images built to exhaust it (refused at its limits:
# ≤ 1 GiB RSS, ≤ 5 min). Included by the Makefile.

.PHONY: bench-guards

BENCH_TARGETS += bench-guards

bench-guards: build
	FERRY_REQUIRE_TOOLS=1 $(GO) test -count=1 -run '^$$' -bench '^BenchmarkCreateLargeRepository$$' -benchtime 1x -timeout 30m -v ./artifact/gitrepo | grep -v '^=== RUN'; \
	  s1=$${PIPESTATUS[0]}; \
	FERRY_SBOM=$(BIN)/ferry-sbom $(GO) test -count=1 -run '^$$' -bench '^BenchmarkSBOMHostile$$' -benchtime 1x -timeout 30m -v ./artifact/sbomexec | grep -v '^=== RUN'; \
	  s2=$${PIPESTATUS[0]}; \
	exit $$(( s1 | s2 ))
