#!/usr/bin/env bash
# golangci-lint v2 with the repository's .golangci.yml (depguard holds the package structure).
# Installs the pinned version with `go install` when it is missing (cached in GOPATH/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v2.7.2
bin="$(go env GOPATH)/bin/golangci-lint"
if ! [ -x "$bin" ] || ! "$bin" version 2>/dev/null | grep -q "version ${version#v} "; then
  echo "lint: installing golangci-lint $version (once, about two minutes)" >&2
  go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$version"
fi
# Another run on this machine (another checkout, an editor) holds golangci-lint's lock: wait
# for it rather than fail.
exec "$bin" run --allow-serial-runners ./...
