#!/usr/bin/env bash
# Every test: formatting and vet, the Go suite under -race against the real servers.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== gofmt / go vet"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt would change: $bad"; exit 1; fi
go vet ./...
echo "== docker-compose config"; ./scripts/compose-check.sh
echo "== go test -race"
go test -race -count=1 -timeout 8m ./...
echo "== web e2e"
./scripts/web-e2e.sh
echo "== k6 smoke"; ./scripts/k6.sh
