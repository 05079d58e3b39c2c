# bench-sbom-audit (issue 53): an audit of a 1 GiB package (three images,
# real SBOMs of some 3,000 components each, made by bin/ferry-sbom) against
# the whole Go vulnerability database (golang.org/x/vulndb's data/osv,
# through the module proxy) carried as a package, against reading the
# package's SBOMs alone; fails over the issue's budget, ratio ≤ 2. The
# packages are made once and kept in the temporary folder.

.PHONY: bench-sbom-audit

BENCH_TARGETS += bench-sbom-audit

bench-sbom-audit: build
	@FERRY_SBOM=$(BIN)/ferry-sbom $(GO) test -count=1 -run '^$$' -bench '^BenchmarkAudit$$' -benchtime 3x -timeout 60m ./artifact/bomscan/ | tee /dev/stderr | \
	  awk '/^BenchmarkAudit/ { for (i = 2; i < NF; i++) if ($$(i+1) == "ratio") r = $$i } \
	  END { if (r == "") { print "bench-sbom-audit: no result"; exit 1 } \
	        if (r + 0 > 2) { printf "bench-sbom-audit: audit/read %.2f over the budget of 2\n", r; exit 1 } \
	        printf "bench-sbom-audit: audit/read %.2f (budget 2)\n", r }'
