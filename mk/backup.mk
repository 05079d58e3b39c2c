# bench-backup (issue 54): a backup of FERRY_BENCH_BACKUP_MIB MiB (default
# 1024) of random layers in the in-process registry, and its restore into
# another, each against a plain copy of the same bytes (cp -r of the
# registry's storage folder, then sync). Budget: each at most
# BACKUP_BUDGET (1.2) times the copy; over it, the target fails.

.PHONY: bench-backup

BENCH_TARGETS += bench-backup
BACKUP_BUDGET ?= 1.2

bench-backup:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkBackupRatio$$' -benchtime 1x -timeout 30m ./deploy/backup | tee /dev/stderr | \
	  awk -v budget=$(BACKUP_BUDGET) '/^BenchmarkBackupRatio/ { for (i = 2; i <= NF; i++) m[$$(i)] = $$(i-1) } \
	  END { if (m["backup-ratio"] == "") { print "bench-backup: no result"; exit 1 } \
	        printf "backup of %s MiB: %ss, restore %ss, plain copy %ss (ratios %s and %s, budget %s)\n", \
	          m["MiB"], m["backup-s"], m["restore-s"], m["copy-s"], m["backup-ratio"], m["restore-ratio"], budget; \
	        if (m["backup-ratio"] > budget || m["restore-ratio"] > budget) { print "bench-backup: over budget"; exit 1 } }'
