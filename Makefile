# elasticps: a Go parameter server speaking ps-lite's protocol.
#   make demo   run the demo job (installs system packages when missing)
#   make test   vet, staticcheck, race tests, process tests, compat tests
SHELL := /bin/bash
GO ?= go
BIN := bin
STATICCHECK_VERSION := v0.8.2

.PHONY: all build demo test deps vet staticcheck unit clean fmt-check

all: build

# System packages: libzmq (ZeroMQ van), a C++ toolchain (bridge and compat
# programs). Installed only when missing; needs root (apt-get).
deps:
	@./scripts/install-deps.sh

build: deps
	$(GO) build -o $(BIN)/elasticps ./cmd/elasticps

demo: build
	./$(BIN)/elasticps demo

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: deps
	$(GO) vet ./...

staticcheck: deps
	@command -v staticcheck >/dev/null 2>&1 || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$$( command -v staticcheck || echo $$($(GO) env GOPATH)/bin/staticcheck ) ./...

unit: deps
	$(GO) test -race -count=1 -timeout 20m ./...

test: fmt-check vet staticcheck unit

clean:
	rm -rf $(BIN) cbridge/build compat_tests/build
