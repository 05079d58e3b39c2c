# interop-zarf (issue 35): Zarf v0.60.0 built from the module proxy
# (e2e/zarf: a wrapper module with Zarf's replace directives, cached in
# ~/.cache/ferry-e2e/bin), then artifact/zarf's test against real Zarf
# packages (convert + create and import carry what Zarf carries). Not in
# `make test`: the build alone outlasts it on a fresh 2-core machine.

.PHONY: interop-zarf

interop-zarf:
	sh e2e/zarf/build.sh
	FERRY_REQUIRE_ZARF=1 $(GO) test -count=1 -run 'Zarf' -v ./artifact/zarf
