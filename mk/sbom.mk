# SBOMs: the ferry-sbom helper's module (sbomgen/go.mod: Syft, stereoscope,
# an SQLite) is not the main module, so `go test ./...` does not reach it;
# `make test` runs its tests here. The main module's SBOM tests (artifact,
# artifact/sbomexec, cmd/ferry) build the helper themselves, once per test
# binary, or run $FERRY_SBOM. `make bench` runs BenchmarkCreateSBOM with
# bin/ferry, whose ferry-full runs bin/ferry-sbom.

.PHONY: sbomgen-test

TEST_TARGETS += sbomgen-test

sbomgen-test:
	cd sbomgen && $(GO) test -count=1 ./...
