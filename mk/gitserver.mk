# bench-gitserver (issue 28): the git server's peak RSS (ru_maxrss of a
# child process running gitserver.Server) while it indexes and serves a
# full clone, by Debian's git, of a repository holding one 3 GiB file
# (incompressible, made with git fast-import, carried as the bundle `git
# bundle create` writes). Budget: 200 MiB. Takes ~15 min on 2 cores and
# ~10 GiB of disk in $TMPDIR. FERRY_GITSERVER_BENCH_MIB changes the size.

.PHONY: bench-gitserver

BENCH_TARGETS += bench-gitserver

bench-gitserver:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkServeLargeFile$$' -benchtime 1x -timeout 60m ./deploy/gitserver | tee /dev/stderr | \
	  awk '/^BenchmarkServeLargeFile/ { for (i = 2; i <= NF; i++) { if ($$i == "rss-MiB") r = $$(i-1); if ($$i == "file-MiB") f = $$(i-1) } } \
	  END { if (r == "") { print "bench-gitserver: no result"; exit 1 } \
	        printf "git server peak RSS serving a clone of a %s MiB file: %s MiB (budget <= 200 MiB)\n", f, r; \
	        if (r + 0 > 200) exit 1 }'; \
	  s=("$${PIPESTATUS[@]}"); [ "$${s[0]}" -eq 0 ] && [ "$${s[2]}" -eq 0 ]
