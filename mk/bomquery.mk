# bench-sbom-query (issue 53): an index of 10,000 SBOMs of realistic shape
# (150-400 components each from ~20,000 distinct name/version pairs over
# deb, apk, golang, npm and pypi) read from its file, then a package URL
# range query and a name query (BenchmarkQueryIndex, artifact/bom).
# Budget: 1 s for the read and both queries; the benchmark fails over it,
# and so does this target. Takes ~10 s.

.PHONY: bench-sbom-query

BENCH_TARGETS += bench-sbom-query

bench-sbom-query:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkQueryIndex$$' -benchtime 5x -benchmem ./artifact/bom | tee /dev/stderr | \
	  awk '/^BenchmarkQueryIndex/ { ns = $$3 } \
	  END { if (ns == "") { print "bench-sbom-query: no result"; exit 1 } \
	        printf "index of 10,000 SBOMs read and queried twice: %.0f ms (budget <= 1000 ms)\n", ns / 1e6; \
	        if (ns + 0 > 1e9) exit 1 }'; \
	  s=("$${PIPESTATUS[@]}"); [ "$${s[0]}" -eq 0 ] && [ "$${s[2]}" -eq 0 ]
