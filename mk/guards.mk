# Input budgets (issue 28) measured on inputs as large and hostile as the
# issue's: create of a repository holding a 3 GiB file (peak RSS ≤ 150 MiB),
# the SBOM helper on images built to exhaust it (refused at its limits:
# ≤ 1 GiB RSS, ≤ 5 min), and charts (issue 49): find-images of the
# third-party charts in the bounded child ≤ 1.2× the CPU of rendering them
# in-process, hostile charts refused at its limits (≤ 512 MiB, ≤ 30 s).
# Included by the Makefile.

.PHONY: bench-guards

BENCH_TARGETS += bench-guards

bench-guards: build
	FERRY_REQUIRE_TOOLS=1 $(GO) test -count=1 -run '^$$' -bench '^BenchmarkCreateLargeRepository$$' -benchtime 1x -timeout 30m -v ./artifact/gitrepo | grep -v '^=== RUN'; \
	  s1=$${PIPESTATUS[0]}; \
	FERRY_SBOM=$(BIN)/ferry-sbom $(GO) test -count=1 -run '^$$' -bench '^BenchmarkSBOMHostile$$' -benchtime 1x -timeout 30m -v ./artifact/sbomexec | grep -v '^=== RUN'; \
	  s2=$${PIPESTATUS[0]}; \
	FERRY_REQUIRE_TOOLS=1 $(GO) test -count=1 -run '^$$' -bench '^BenchmarkFindImagesThirdParty$$' -benchtime 5x -timeout 30m -v ./artifact/chartrender | grep -v '^=== RUN'; \
	  s3=$${PIPESTATUS[0]}; \
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkHostileCharts$$' -benchtime 1x -timeout 30m -v ./artifact/chartrender | grep -v '^=== RUN'; \
	  s4=$${PIPESTATUS[0]}; \
	exit $$(( s1 | s2 | s3 | s4 ))
