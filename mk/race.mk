# race (issue 15): the race detector over the embedded registry's tests and
# the artifact tests of concurrent code (parallel push walks, the prefetch
# reader, concurrent pushes, cancelled pushes). Included by the Makefile;
# `make test` runs it after go test.
#
# The whole artifact package under -race took 441 s of tests (TestPushStreams
# alone 412 s: 6 MiB layers hashed through the instrumented code), so only the
# tests below run there: 33 s. ./registry/... takes 10 s. Cold, the -race
# build of artifact's dependencies (helm, cosign, client-go) adds about
# 10 minutes on 2 busy cores; it is cached afterwards.

.PHONY: race

TEST_TARGETS += race

RACE_ARTIFACT_TESTS ?= ^(TestPushPullRoundTrip|TestInterruptedPush|TestConcurrentPushes|TestPushAuth|TestPullCorruptBlob|TestCraneCopyInterop|TestZstReader|TestReaderRejects|TestReaderFlippedByte|TestFailedPushCancelsUploads|TestVerifiedPushesOnlyTheSignedGraph|TestProgressOneEventPerBlob|TestCopyBetweenTargets|TestReaderFetchVerifies)$$

race:
	FERRY_REQUIRE_TOOLS=1 $(GO) test -race -count=1 ./registry/...
	FERRY_REQUIRE_TOOLS=1 $(GO) test -race -count=1 -run '$(RACE_ARTIFACT_TESTS)' ./artifact
