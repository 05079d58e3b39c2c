# e2e-argocd-build (issue 55): Argo CD v3.6.1 built from the Go module proxy
# with Go 1.27.3 (e2e/argocd: a wrapper module with Argo CD's replace
# directives; e2e/argocd/tools: the helm and kustomize its repo server runs)
# into ~/.cache/ferry-e2e/bin beside kube and Flux, with its manifests in
# ~/.cache/ferry-e2e/argocd (e2e/cluster/build-argocd.sh). Not part of
# `make e2e` yet: e2e/README.md has the cold build's figures.

.PHONY: e2e-argocd-build

e2e-argocd-build:
	@GO=$(GO) bash $(E2E_SCRIPTS)/build-argocd.sh
