// Package e2e holds ferry's end-to-end tests: they run against a real
// single-node Kubernetes (v1.35.4, built from source by e2e/cluster/build.sh
// and started by e2e/cluster/up.sh inside its own network namespace). Run them
// with `make e2e`; without FERRY_E2E_KUBECONFIG they are skipped, and with
// FERRY_E2E=1 a missing cluster fails them. Package e2e/internal/harness
// connects a test to the harness.
package e2e
