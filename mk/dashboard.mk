# bench-dashboard (issue 52): the fleet page with 1,000 members (two
# packages each) from a fake management cluster, through HTTP; with
# FERRY_FLEET_BENCH_KUBECONFIG naming a real API server (run the test
# binary where it is reached: e2e/cluster/exec.sh), from it too. Budget:
# 300 ms (the benchmarks fail over it).

.PHONY: bench-dashboard

BENCH_TARGETS += bench-dashboard

bench-dashboard:
	$(GO) test -count=1 -run '^$$' -bench '^BenchmarkFleetPage' -benchtime 20x ./deploy/dashboard
