# flashsale: `make run` starts everything locally, `make test` runs every test.
GO ?= go
export K6_NO_USAGE_REPORT = true

.PHONY: run test test-faults test-fleet lint vet fmt build bench services

run: services build
	./scripts/run.sh

# flashsale_build_info's version and commit (internal/metrics), from git when there is one.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS := -X github.com/flashsale/flashsale/internal/metrics.Version=$(VERSION) \
	-X github.com/flashsale/flashsale/internal/metrics.Commit=$(COMMIT)

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

services:
	./scripts/services.sh

test: services
	./scripts/test.sh

# Only the fault matrix (real processes, toxiproxy, kill -9): a few minutes.
test-faults: services
	$(GO) test -race -tags faults -count=1 -timeout 15m -v ./internal/testing/faults/

# Only the fleet stage: a 3-master Redis Cluster, a 4-partition topic, two apis and
# two reconcilers (real -race binaries), 2,000 items, one reconciler killed mid-sale: about 2 minutes.
test-fleet: services
	$(GO) test -race -tags fleet -count=1 -timeout 10m -v ./internal/testing/fleet/

# The performance table of docs/performance.md: the api against naive baselines, in one run.
bench: services
	$(GO) run ./cmd/bench

vet:
	gofmt -l . | (! grep .) && $(GO) vet ./...

# golangci-lint (pinned, installed when missing) with .golangci.yml; part of make test.
lint:
	./scripts/lint.sh

fmt:
	gofmt -w .
