# bench-backup (issue 54): a backup of FERRY_BENCH_BACKUP_MIB MiB (default
# 1024) of random layers in the in-process registry, and its restore into
# another, each against a checked copy of the same bytes (each blob's file
# copied and its SHA-256 checked, two at a time, then sync) and a plain one
# (cp -r of the registry's storage folder, then sync). Budget: each at most
# BACKUP_BUDGET (1.2) times the checked copy; over it, the target fails.
# The ratios to cp, and to oras backup/restore of the same repositories
# (the peer, where installed), are reported beside (docs/performance.md:
# why the budget is not on cp).

.PHONY: bench-backup

BENCH_TARGETS += bench-backup
BACKUP_BUDGET ?= 1.2

bench-backup:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkBackupRatio$$' -benchtime 1x -timeout 30m ./deploy/backup | tee /dev/stderr | \
	  awk -v budget=$(BACKUP_BUDGET) '/^BenchmarkBackupRatio/ { for (i = 2; i <= NF; i++) m[$$(i)] = $$(i-1) } \
	  END { if (m["backup-ratio"] == "") { print "bench-backup: no result"; exit 1 } \
	        printf "backup of %s MiB: %ss, restore %ss, checked copy %ss (ratios %s and %s, budget %s); plain copy %ss (ratios %s and %s)\n", \
	          m["MiB"], m["backup-s"], m["restore-s"], m["checked-s"], m["backup-ratio"], m["restore-ratio"], budget, \
	          m["copy-s"], m["plain-backup-ratio"], m["plain-restore-ratio"]; \
	        if (m["oras-backup-s"] != "") printf "oras backup %ss, oras restore %ss (ferry takes %s and %s of their time)\n", \
	          m["oras-backup-s"], m["oras-restore-s"], m["oras-backup-ratio"], m["oras-restore-ratio"]; \
	        if (m["backup-ratio"] > budget || m["restore-ratio"] > budget) { print "bench-backup: over budget"; exit 1 } }'
