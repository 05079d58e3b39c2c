# bench-storage (issue 18): `ferry registry serve` on S3 (MinIO from .bin/
# on loopback) against the filesystem — push and pull of one 1 GiB blob,
# budget: S3 ≤ 1.5× the filesystem's time for each — and blob GET
# throughput of two serve processes on one bucket against one.

.PHONY: bench-storage

BENCH_TARGETS += bench-storage

bench-storage: build
	FERRY_REQUIRE_TOOLS=1 FERRY_BIN=$(BIN)/ferry $(GO) test -count=1 -run '^$$' -bench '^BenchmarkS3Storage$$' -benchtime 1x -timeout 30m ./registry | tee /dev/stderr | \
	  awk '/^BenchmarkS3Storage/ { for (i = 2; i <= NF; i++) m[$$(i)] = $$(i-1) } \
	  END { if (m["push-ratio"] == "") { print "bench-storage: no result"; exit 1 } \
	        printf "1 GiB blob, S3 (MinIO, loopback) vs filesystem: push %s vs %s MB/s (ratio %s), pull %s vs %s MB/s (ratio %s) (budget <= 1.50)\n", \
	          m["s3-push-MB/s"], m["fs-push-MB/s"], m["push-ratio"], m["s3-pull-MB/s"], m["fs-pull-MB/s"], m["pull-ratio"]; \
	        printf "64 MiB blob GETs, 4 at once: 2 replicas %s MB/s, 1 replica %s MB/s (ratio %s)\n", m["2-replicas-MB/s"], m["1-replica-MB/s"], m["replica-ratio"]; \
	        if (m["push-ratio"] + 0 > 1.5 || m["pull-ratio"] + 0 > 1.5) exit 1 }'
