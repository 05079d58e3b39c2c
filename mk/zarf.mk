# interop-zarf (issue 35): Zarf v0.60.0 built from the module proxy
# (e2e/zarf: a wrapper module with Zarf's replace directives, cached in
# ~/.cache/ferry-e2e/bin), then artifact/zarf's test against real Zarf
# packages (convert + create and import carry what Zarf carries), then
# e2e's TestZarfDeploy in a one-node e2e cluster (both ferry packages
# deployed: their Pods run the image by the digest Zarf carries). Not in
# `make test`: the build alone outlasts it on a fresh 2-core machine.
# `make e2e` runs TestZarfDeploy too once zarf is built (skipped before).

.PHONY: interop-zarf

interop-zarf: e2e-build build
	sh e2e/zarf/build.sh
	FERRY_REQUIRE_ZARF=1 $(GO) test -count=1 -run 'Zarf' -v ./artifact/zarf
	@FERRY_REQUIRE_ZARF=1 FERRY_E2E_WORKERS=0 GO=$(GO) bash $(E2E_SCRIPTS)/test.sh -count=1 -timeout 15m -run 'TestZarfDeploy' -v ./e2e/
