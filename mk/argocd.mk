# e2e-argocd-build (issue 55): Argo CD v3.6.1 built from the Go module proxy
# with Go 1.27.3 (e2e/argocd: a wrapper module with Argo CD's replace
# directives; e2e/argocd/tools: the helm and kustomize its repo server runs)
# into ~/.cache/ferry-e2e/bin beside kube and Flux, with its manifests and
# git-verify-wrapper.sh in ~/.cache/ferry-e2e/argocd
# (e2e/cluster/build-argocd.sh).
# e2e-argocd: that build, then e2e's TestArgoCD (Argo CD deployed by ferry as
# a package, Applications and an ApplicationSet synced through the agent's
# rewrite) in a one-node e2e cluster, failing rather than skipping without
# the build. Not in `make test`: the cold build (~15 min for argocd, ~5 for
# helm on 2 cores) outlasts its budget; once the build is cached, `make e2e`
# runs TestArgoCD too (it skips only when the build is absent).

.PHONY: e2e-argocd-build e2e-argocd

e2e-argocd-build:
	@GO=$(GO) bash $(E2E_SCRIPTS)/build-argocd.sh

e2e-argocd: e2e-build build e2e-argocd-build
	@FERRY_REQUIRE_ARGOCD=1 FERRY_E2E_WORKERS=0 FERRY_E2E_CENTRE=0 GO=$(GO) bash $(E2E_SCRIPTS)/test.sh -count=1 -timeout 25m -run '^TestArgoCD' -v ./e2e/
