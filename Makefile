# elasticps: a Go parameter server speaking ps-lite's protocol.
#   make demo   run the demo job (installs system packages when missing)
#   make test   vet, staticcheck, race tests, process tests, compat tests,
#               every fuzz target briefly
SHELL := /bin/bash
GO ?= go
# A process built with -race sleeps 1 s before it exits (atexit_sleep_ms);
# the tests start many such processes (their nodes are the test
# binaries), so they exit at once here. Races are reported as before.
export GORACE ?= atexit_sleep_ms=0
BIN := bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build demo test deps vet staticcheck unit unit-train unit-tcp unit-mem unit-shm rdma compat compat-fabric bridge clean fmt-check fuzz-short

all: build

# System packages: libzmq (ZeroMQ van), a C++ toolchain (bridge and compat
# programs). Installed only when missing; needs root (apt-get).
deps:
	@./scripts/install-deps.sh

build: deps
	$(GO) build -o $(BIN)/elasticps ./cmd/elasticps

# The demo ends with a short real training run: an MLP (1.07M parameters)
# on MNIST, 2 workers x 2 servers, BSP against ASP; it prints the table and
# where the plot is.
demo: build
	./$(BIN)/elasticps demo
	./$(BIN)/elasticps train --workers 4 --servers 2 --compare bsp,fluent --pause-prob 0.1 --iterations 250 --eval-every 25 \
		--straggle-every 4 --straggle-mean 100 --straggle-sd 10 --out $(BIN)/train-demo

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# The packages whose code changes with -tags rdma: van/rdma and what
# imports it (tests included); the second vet and staticcheck passes look
# only at them.
RDMA_PKGS = $$($(GO) list -tags rdma -test -f '{{.ImportPath}} {{join .Deps " "}}' ./... | grep van/rdma | awk '{print $$1}' | grep -v -e '\.test$$' -e '_test$$' -e '\[' | sort -u)

vet: deps
	$(GO) vet ./...
	$(GO) vet -tags rdma $(RDMA_PKGS)

STATICCHECK = $$( command -v staticcheck || echo $$($(GO) env GOPATH)/bin/staticcheck )

staticcheck: deps
	@command -v staticcheck >/dev/null 2>&1 || test -x $$($(GO) env GOPATH)/bin/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags rdma $(RDMA_PKGS)

# Every package, race detector on, ZeroMQ van (ps-lite's wire).
unit: deps
	$(GO) test -race -count=1 -timeout 20m ./...

# The whole-job suites again over the pure-Go TCP van (its own tests ran
# under the race detector in unit).
unit-tcp: deps
	ELASTICPS_TEST_VAN=tcp $(GO) test -count=1 -timeout 10m ./kv ./postoffice

# The whole training jobs of internal/train (MNIST, every sync mode, moves
# under a slowed server), which unit skips: race-instrumented, their 5
# processes per mode take minutes on 2 cores.
unit-train: deps
	$(GO) test -count=1 -timeout 10m -run 'EndToEnd' ./internal/train

# The shared-memory van's own tests and the whole-job suites over it, then
# over samehost (tcp with PS_SHM_AUTO=1: on one host, every peer over shm;
# van/samehost's own tests run its tcp side too).
unit-shm: deps
	$(GO) test -race -count=1 -timeout 10m ./van/shm ./van/samehost
	ELASTICPS_TEST_VAN=shm $(GO) test -race -count=1 -timeout 10m ./kv ./postoffice
	ELASTICPS_TEST_VAN=samehost $(GO) test -race -count=1 -timeout 10m ./kv ./postoffice

# The whole-job suites on the in-memory van (van/memvan): no sockets, so a
# failure here is the library's, not the network's. Tests that need a real
# socket skip, saying so. Without the race detector: these suites ran
# under it in unit.
unit-mem: deps
	ELASTICPS_TEST_VAN=mem $(GO) test -count=1 -timeout 10m ./kv ./postoffice ./elastic/...

# The RDMA van: its own tests and the whole-job suites over libfabric's
# tcp;ofi_rxm provider (real one-sided writes; no RDMA device needed).
rdma: deps
	$(GO) test -tags rdma -race -count=1 -timeout 10m ./van/rdma/...
	ELASTICPS_TEST_VAN=fabric $(GO) test -tags rdma -count=1 -timeout 10m ./kv ./postoffice

# The C++ bridge (libps.a, ps-lite's API) and the C++ compatibility
# programs, each run as a local job.
bridge: deps
	$(MAKE) -C cbridge

compat: bridge
	$(MAKE) -C compat_tests run
	ELASTICPS_REQUIRE_CPP=1 $(GO) test -count=1 -timeout 5m -run 'TestChaosReplicatedCppServers|TestSchedulerKilledAndRestartedCpp|TestSchedulerKilledAndRestartedInstanceGroups|TestSchedulerKilledAndRestartedJoint' ./e2e

# The same C++ programs with the RDMA build of the bridge, every node on
# libfabric (DMLC_ENABLE_RDMA=fabric).
compat-fabric: deps
	$(MAKE) -C compat_tests run-fabric

# The quick-start programs of README.md (examples/), each built and run as a
# local job: a worker whose pulled sums are not exact exits non-zero, which
# fails the job, and every worker must print its "exact" line.
.PHONY: examples
examples: build bridge
	$(GO) build -o $(BIN)/quickstart ./examples/go/quickstart
	$(CXX) -std=c++11 -O2 -Wall -Wextra -Werror -I cbridge/include -o $(BIN)/quickstart-cpp \
	  examples/cpp/quickstart.cc cbridge/build/libps.a -lzmq -lpthread -ldl -lm
	@for prog in "-s 2 -w 2 -- ./$(BIN)/quickstart" "-s 1 -w 2 -- ./$(BIN)/quickstart-cpp"; do \
	  echo "elasticps local $$prog"; \
	  out=$$(./$(BIN)/elasticps local --timeout 2m $$prog) || { echo "$$out"; exit 1; }; \
	  echo "$$out"; \
	  n=$$(grep -c ' exact' <<<"$$out"); \
	  if [ "$$n" -ne 2 ]; then echo "examples: $$n of 2 workers reported exact sums"; exit 1; fi; \
	done

# Every fuzz target (func FuzzX in a _test.go file; the rdma ones with
# -tags rdma) for FUZZTIME each (18 targets),
# starting from its committed corpus (testdata/fuzz/FuzzX/). A longer run
# of one: scripts/fuzz.sh 10m FuzzX.
FUZZTIME ?= 1s
fuzz-short: deps
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME)

test: fmt-check vet staticcheck unit unit-train unit-tcp unit-mem unit-shm rdma compat compat-fabric examples fuzz-short

clean:
	rm -rf $(BIN) cbridge/build cbridge/build-rdma cbridge/deps compat_tests/build compat_tests/build-rdma
