# bench-dashboard (issue 52): the fleet page with 1,000 members (two
# packages each) from a fake management cluster, through HTTP. Budget:
# 300 ms (the benchmark fails over it).

.PHONY: bench-dashboard

BENCH_TARGETS += bench-dashboard

bench-dashboard:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkFleetPage$$' -benchtime 20x ./deploy/dashboard
