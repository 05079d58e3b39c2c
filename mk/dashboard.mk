# bench-dashboard (issue 52): the fleet page with 1,000 members (two
# packages each) from a fake management cluster, through HTTP; with
# FERRY_FLEET_BENCH_KUBECONFIG naming a real API server (run the test
# binary where it is reached: e2e/cluster/exec.sh), from it too. Budget:
# 300 ms (the benchmarks fail over it). And (issue 53) a page of an SBOM
# of 5,000 components the real helper made: 100 ms.

.PHONY: bench-dashboard

BENCH_TARGETS += bench-dashboard

bench-dashboard:
	$(GO) test -count=1 -run '^$$' -bench '^Benchmark(FleetPage|SBOMPage)' -benchtime 20x ./deploy/dashboard
