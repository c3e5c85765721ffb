#!/usr/bin/env bash
# Every test, each stage run even when an earlier one failed, against the real servers:
# formatting, vet and lint, the repository's self-containedness, compose validation, the events'
# AsyncAPI document, the alert rules, the Go suite under -race (Redis, a local Redis Cluster,
# PostgreSQL, the kfake broker over TCP), the fault matrix, the fleet, the browser suite in
# headless Chromium, and the k6 smoke. The last line sums it up; the exit code is non-zero if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export K6_NO_USAGE_REPORT=true

stages_passed=0 stages_failed=0 failed_names=()
stage() { # stage NAME COMMAND...
  local name=$1; shift
  echo "== $name"
  local start=$SECONDS
  if "$@"; then
    stages_passed=$((stages_passed + 1)); echo "== $name: ok ($((SECONDS - start)) s)"
  else
    stages_failed=$((stages_failed + 1)); failed_names+=("$name"); echo "== $name: FAILED ($((SECONDS - start)) s)"
  fi
}

# A stage that mostly waits (on failovers, partitions, timeouts) runs beside the next ones:
# background_stage starts it with its output kept aside; await_background prints and counts it.
bg_pid="" bg_name="" bg_out=""
background_stage() { # background_stage NAME COMMAND...
  bg_name=$1; shift
  bg_out=$(mktemp)
  echo "== $bg_name: started beside the next stages (its output follows when it ends)"
  ( start=$SECONDS; if "$@"; then echo "== $bg_name: ok ($((SECONDS - start)) s)"; exit 0; fi
    echo "== $bg_name: FAILED ($((SECONDS - start)) s)"; exit 1 ) >"$bg_out" 2>&1 &
  bg_pid=$!
}
await_background() {
  [ -n "$bg_pid" ] || return 0
  echo "== $bg_name (output of the stage run beside)"
  if wait "$bg_pid"; then stages_passed=$((stages_passed + 1)); else stages_failed=$((stages_failed + 1)); failed_names+=("$bg_name"); fi
  cat "$bg_out"; rm -f "$bg_out"
}

# go vet's analyzers run in the golangci-lint stage (its govet linter, with the faults and fleet
# build tags, so the tagged test packages are vetted too): type-checking the tree once, not twice.
fmt_check() {
  local bad
  bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './web/e2e/node_modules/*'))
  if [ -n "$bad" ]; then echo "gofmt would change: $bad"; return 1; fi
}

# The events test reads the topic back with kcat (librdkafka): a Kafka client nobody here wrote.
ensure_kcat() {
  command -v kcat >/dev/null && return 0
  echo "installing kcat (Debian package) for the events test"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null 2>&1 ||
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null; }
}

# The stripe provider's requests are checked by stripe-mock (Stripe's OpenAPI-driven mock),
# pinned and installed with go install like the other Go tools (cached in GOPATH/bin).
ensure_stripe_mock() {
  local bin; bin="$(go env GOPATH)/bin/stripe-mock"
  [ -x "$bin" ] && [ -f "$bin.v0.203.0" ] && return 0
  echo "installing stripe-mock v0.203.0 (go install) for the payment tests"
  go install github.com/stripe/stripe-mock@v0.203.0 && touch "$bin.v0.203.0"
}

go_tests() {
  ensure_kcat || echo "kcat could not be installed; the kcat test will fail saying so"
  ensure_stripe_mock || echo "stripe-mock could not be installed; TestStripeProviderAgainstStripeMock will fail saying so"
  go test -race -count=1 -timeout 9m -json ./... | ./bin/testsummary
}

# The Go stages' one-line summaries; built once, before any stage runs beside another.
go build -o bin/testsummary ./cmd/testsummary || { echo "cmd/testsummary does not build"; exit 1; }
stage "gofmt" fmt_check
stage "repository stands alone (LICENSE, links, go mod tidy)" ./scripts/repo-check.sh
stage "golangci-lint (go vet, staticcheck, depguard, ...)" ./scripts/lint.sh
stage "docker-compose config" ./scripts/compose-check.sh
stage "Kafka events document (AsyncAPI)" ./scripts/asyncapi-check.sh
stage "alert rules and dashboard (promtool)" ./scripts/alerts-check.sh
stage "go test -race" go_tests
# The fault matrix (internal/testing/faults, build tag faults): real api and reconciler processes,
# toxiproxy, kill -9, server restarts. Its own stage: it builds -race binaries and takes minutes.
fault_matrix() {
  command -v redis-server >/dev/null || { echo "redis-server is missing: ./scripts/services.sh installs it"; return 1; }
  local out
  out=$(go test -race -tags faults -count=1 -timeout 15m -json ./internal/testing/faults/ | ./bin/testsummary) ; local rc=$?
  echo "$out"
  # A matrix that ran nothing (a lost build tag, a renamed package) must not pass.
  if echo "$out" | grep -q "^go test: 0 passed"; then echo "the fault matrix ran no scenario"; return 1; fi
  return $rc
}
background_stage "fault matrix (real processes)" fault_matrix
# The fleet (internal/testing/fleet, build tag fleet): a 3-master Redis Cluster, a 4-partition topic,
# two apis and two reconcilers (real -race binaries), 2,000 items, one reconciler kill -9'd.
fleet() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
    { echo "redis-server or redis-cli is missing: ./scripts/services.sh installs them"; return 1; }
  local out
  out=$(go test -race -tags fleet -count=1 -timeout 10m -json ./internal/testing/fleet/ | ./bin/testsummary) ; local rc=$?
  echo "$out"
  # A stage that ran nothing (a lost build tag, a renamed package) must not pass.
  if echo "$out" | grep -q "^go test: 0 passed"; then echo "the fleet stage ran no test"; return 1; fi
  return $rc
}
stage "fleet (cluster, 2 apis, 2 reconcilers)" fleet
stage "web e2e (headless Chromium)" ./scripts/web-e2e.sh
stage "k6 smoke" ./scripts/k6.sh
await_background

[ ${#failed_names[@]} -gt 0 ] && printf 'failed stage: %s\n' "${failed_names[@]}"
echo "stages: $stages_passed passed, $stages_failed failed"
[ "$stages_failed" -eq 0 ]
