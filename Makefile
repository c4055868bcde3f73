# Relevance scoring system. `make run` starts a local cluster; `make test` runs the test suite.
SHELL := /bin/bash
GO ?= go
BIN := bin
PKGS := ./...
export CGO_ENABLED ?= 1
# promtool, when .ci/run has unpacked it there, for the metrics exposition checks.
export PATH := $(CURDIR)/.cache/promtool/usr/bin:$(PATH)

.PHONY: all build test vet lint test-race test-purego proto proto-check run bench clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/scorer ./cmd/proxy ./cmd/bench

# The suite CI runs: vet, lint, race tests, a purego (no assembly) build and test of the kernels.
test: vet lint test-race test-purego

vet:
	$(GO) vet $(PKGS)

lint:
	$(GO) tool staticcheck $(PKGS)

test-race:
	$(GO) test -race -count=1 -timeout 20m $(PKGS)

test-purego:
	$(GO) build -tags purego $(PKGS)
	$(GO) test -tags purego -count=1 -timeout 10m ./kernels/... ./tokenizer/...
	$(GO) test -tags purego -count=1 -timeout 5m -run '^TestArithmeticVersionNamesTheBits$$' ./scorer/model/

# Regenerate the protocol code with the pinned generators (go.mod tool directives) and Debian's protoc.
proto:
	@mkdir -p .cache/protoc-bin
	$(GO) build -o .cache/protoc-bin/ google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc
	PATH=$(CURDIR)/.cache/protoc-bin:$$PATH protoc -I proto \
		--go_out=. --go_opt=module=github.com/relevance-scoring/relevance \
		--go-grpc_out=. --go-grpc_opt=module=github.com/relevance-scoring/relevance \
		proto/relevance/v1/relevance.proto

# Fails when the committed generated code differs from what `make proto` writes.
proto-check: proto
	@git diff --exit-code -- proto/ || { echo "proto/: generated code is stale; run make proto and commit"; exit 1; }

run: build
	./$(BIN)/bench cluster --config configs/local.yaml

# The fault suite on a local emulated cluster (bench/faults); results in bench/results/faults/.
.PHONY: faults
faults: build
	./$(BIN)/bench faults

bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 6 ./kernels/... ./tokenizer/... ./proxy/... ./scorer/... ./bench/... | tee bench.txt

clean:
	rm -rf $(BIN) .cache
