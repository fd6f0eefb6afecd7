# boltinformer. `make test` is the test command the README gives and .ci/run calls.
# Heavier tiers: BOLTINFORMER_HEAVY=1 make test (long crash loop, 100k-object
# benchmarks, more differential seeds), or the targets below.

GO        ?= go
export GOWORK := off

ifdef BOLTINFORMER_HEAVY
export BOLTINFORMER_CRASH_KILLS ?= 1000
export BOLTINFORMER_BENCH_LARGE ?= 1
export BOLTINFORMER_DIFF_SEEDS ?= 200
export BOLTINFORMER_FLEET_AGENTS ?= 500
export BOLTINFORMER_LOCALAPI_LOAD ?= 1
export BOLTINFORMER_POWERLOSS ?= 1
export BOLTINFORMER_BENCH_CR ?= 1
export BOLTINFORMER_KCM ?= 1
export BOLTINFORMER_NOTIME_ROUNDS ?= 8
endif

# The modules beside the library's (their own go.mod each): the
# controller-runtime cache, its end-to-end tests, the example operator.
CR_MODULES := controllerruntime controllerruntime/e2e examples/operator

.PHONY: test test-unit test-race test-e2e test-crash test-powerloss strace fuzz bench bench-cr test-kcm bench-kcm lint-kcm lint demo

test: lint test-unit fuzz test-e2e

lint:
	@out="$$(gofmt -l . )"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd test/kas && $(GO) vet ./...
	for m in $(CR_MODULES); do (cd $$m && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...) || exit 1; done

test-unit: strace
	$(GO) test -count=1 ./...
	cd controllerruntime && $(GO) test -count=1 ./...
	# One delta and a batch take one path: the informer's tests again with
	# client-go's batch processing off (it is on by default in v0.37); the
	# crash loop with fewer kills (its history is the same either way).
	KUBE_FEATURE_InOrderInformersBatchProcess=false BOLTINFORMER_CRASH_KILLS=$${BOLTINFORMER_CRASH_KILLS:-15} $(GO) test -count=1 -run 'Fresh|Bookmark|Replay|Partial|Restored|Differential|Crash|Observe' . ./recovery/

# The power-loss test (recovery TestPowerLoss) traces a child with strace.
# BOLTINFORMER_POWERLOSS=1 (the heavy tier) installs it from Debian's
# packages when it is missing and we are root; without it the test skips
# and says why.
strace:
	@if [ "$${BOLTINFORMER_POWERLOSS:-}" = 1 ] && ! command -v strace >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt-get install -y -qq strace >/dev/null; \
		else echo "strace is missing and we are not root: TestPowerLoss will skip"; fi; \
	fi

# Power loss simulated from a strace of a real ingest: every crash state
# (docs/RELIABILITY.md 8.7).
test-powerloss: export BOLTINFORMER_POWERLOSS = 1
test-powerloss: strace
	$(GO) test -count=1 -timeout 60m -v -run 'PowerLoss' ./recovery/ ./internal/powerloss/

test-race:
	$(GO) test -race -count=1 ./...

# Short coverage-guided runs of every fuzz target (their seeds run in
# test-unit too). Counted in executions, not seconds: a time budget that ends
# while the fuzzer minimizes fails with "context deadline exceeded".
FUZZRUNS ?= 20000
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeState$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSnapshot$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime 5000x -fuzzminimizetime 10x ./store/
	$(GO) test -run '^$$' -fuzz '^FuzzDecodePayload$$' -fuzztime 5000x -fuzzminimizetime 10x ./internal/codec/
	$(GO) test -run '^$$' -fuzz '^FuzzParsePath$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./localapi/
	$(GO) test -run '^$$' -fuzz '^FuzzListOptions$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./localapi/
	$(GO) test -run '^$$' -fuzz '^FuzzContinue$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./localapi/
	$(GO) test -run '^$$' -fuzz '^FuzzHandler$$' -fuzztime 5000x -fuzzminimizetime 10x ./localapi/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./internal/powerloss/
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZRUNS)x -fuzzminimizetime 10x ./internal/encryptionconfig/

# End-to-end tests against a real kube-apiserver + etcd on 127.0.0.1 (the
# harness builds it once, ~6 minutes cold, then caches the binary).
test-e2e:
	cd test/kas && $(GO) test -count=1 -timeout 40m ./...
	cd controllerruntime/e2e && $(GO) test -count=1 -timeout 60m ./...

test-crash:
	BOLTINFORMER_CRASH_KILLS=$${BOLTINFORMER_CRASH_KILLS:-1000} $(GO) test -count=1 -timeout 60m -run Crash ./recovery/...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Stock controller-runtime against boltcr.NewCache, side by side: 10k
# ConfigMaps and 10k Pods (100k too with BOLTINFORMER_BENCH_LARGE=1).
bench-cr: export BOLTINFORMER_BENCH_CR = 1
bench-cr:
	cd controllerruntime/e2e && $(GO) test -count=1 -timeout 120m -v -run '^TestBenchmarkStartup$$' ./...

# kube-controller-manager v1.37.2 on boltinformer's persistent informers
# (test/kas/cmd/kcm, built with the tag kcm: ~8 minutes the first time on 2
# cores, then cached) against the real kube-apiserver: warm restarts after
# a clean stop, kill -9, a 410 and an apiserver restart, checked against
# the audit log. About a minute once built.
lint-kcm:
	cd test/kas && $(GO) vet -tags kcm ./cmd/kcm ./kcm && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 -tags kcm ./cmd/kcm ./kcm

test-kcm: export BOLTINFORMER_KCM = 1
test-kcm: lint-kcm
	cd test/kas && $(GO) test -count=1 -timeout 60m -v -tags kcm ./cmd/kcm ./kcm/

# Stock kube-controller-manager against the persistent one, restarts side by
# side: BOLTINFORMER_BENCH_KCM_DEPLOYMENTS Deployments (default 1000) of
# BOLTINFORMER_BENCH_KCM_REPLICAS Pods (default 10); docs/BENCHMARKS.md.
bench-kcm: export BOLTINFORMER_BENCH_KCM = 1
bench-kcm:
	cd test/kas && $(GO) test -count=1 -timeout 180m -v -run '^TestBenchmarkKCMRestart$$' ./kcm/

# The demo: a real apiserver, seeded objects, the edge agent cold then warm.
demo:
	./demo.sh
