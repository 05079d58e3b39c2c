# e2e (issue 7): a real single-node Kubernetes for end-to-end tests — v1.35.4
# built from the Go module proxy (e2e/kube, its own go.mod), Debian's etcd,
# containerd and runc — running inside its own network namespace, and the
# tests under e2e/ run against it (inside that namespace, where 127.0.0.1 is
# the node). Scripts in e2e/cluster/; build output in
# ${XDG_CACHE_HOME:-~/.cache}/ferry-e2e (the cold kube build takes 10-15 min
# on 2 cores, then it is cached).
#
#   make e2e        deps, cached build, up, go test ./e2e/..., down (always)
#   make e2e-up     deps, cached build, up: prints the kubeconfig; run commands
#                   in the node's namespace with e2e/cluster/exec.sh CMD...
#   make e2e-down   stop it and remove everything it made
#
# E2E_TESTFLAGS selects tests, e.g. make e2e E2E_TESTFLAGS='-run NodePort -v'.

.PHONY: e2e e2e-deps e2e-build e2e-up e2e-down

E2E_SCRIPTS   := $(CURDIR)/e2e/cluster
E2E_TESTFLAGS ?= -v

e2e-deps:
	@bash $(E2E_SCRIPTS)/deps.sh

e2e-build: e2e-deps
	@GO=$(GO) bash $(E2E_SCRIPTS)/build.sh

TEST_TARGETS += e2e

# The e2e tests of `ferry init` use the binaries `make build` puts in bin/.
# Screenshots of the browser tests go to out/e2e/_artifacts.
e2e: e2e-build build
	@mkdir -p out/e2e
	@GO=$(GO) bash $(E2E_SCRIPTS)/test.sh -count=1 -timeout 30m -artifacts -outputdir $(CURDIR)/out/e2e $(E2E_TESTFLAGS) ./e2e/...

e2e-up: e2e-build
	@bash $(E2E_SCRIPTS)/up.sh

e2e-down:
	@bash $(E2E_SCRIPTS)/down.sh

# The deploy budget (issue 8): ferry deploy's image push against crane push to
# the in-cluster registry's NodePort, and an unchanged redeploy, in one run;
# the tunnel's (issue 17): ready in < 1 s, its push ≤ 2× the NodePort's; the
# agent's upload and the dashboard's pages with 50 Packages (issue 20).
.PHONY: e2e-bench
BENCH_TARGETS += e2e-bench
e2e-bench: e2e-build build
	@FERRY_E2E_WORKERS=0 GO=$(GO) bash $(E2E_SCRIPTS)/test.sh -count=1 -run '^$$' -bench 'BenchmarkDeploy|BenchmarkTunnel|BenchmarkUpload|BenchmarkDashboard|BenchmarkFleetScale' -benchtime 1x -timeout 40m ./e2e/
