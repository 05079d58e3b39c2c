# bench-gc (issue 32): garbage collection of a filesystem storage of
# FERRY_BENCH_GC_GIB GiB (default 10) with 20% garbage, `ferry registry gc`
# against distribution 2.8's garbage-collect on a hard-linked copy of the
# same storage: wall time, CPU time and peak RSS of each. Reported, no
# budget; fails if the two free different bytes.

.PHONY: bench-gc

BENCH_TARGETS += bench-gc

bench-gc: build
	FERRY_REQUIRE_TOOLS=1 FERRY_BIN=$(BIN)/ferry $(GO) test -count=1 -run '^$$' -bench '^BenchmarkGCRatio$$' -benchtime 1x -timeout 60m ./registry | tee /dev/stderr | \
	  awk '/^BenchmarkGCRatio/ { for (i = 2; i <= NF; i++) m[$$(i)] = $$(i-1) } \
	  END { if (m["ratio"] == "") { print "bench-gc: no result"; exit 1 } \
	        printf "garbage collection of %s GiB (%s GiB garbage): ferry %ss, %s CPU-s, %s MiB RSS; distribution 2.8 %ss, %s CPU-s, %s MiB RSS (time ratio %s)\n", \
	          m["storage-GiB"], m["freed-GiB"], m["ferry-s"], m["ferry-cpu-s"], m["ferry-MiB"], m["dist28-s"], m["dist28-cpu-s"], m["dist28-MiB"], m["ratio"] }'
