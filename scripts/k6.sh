#!/usr/bin/env bash
# Run every k6 scenario in loadtest/ against a fresh api: a short smoke by default (SMOKE=1,
# seconds per scenario; SMOKE=0 for the full load). k6 is built once with `go install` and
# cached in $(go env GOPATH)/bin. The api runs from this tree on a free port with its own
# random Redis key prefix (deleted afterwards), its embedded Kafka broker and its payment
# simulator on free ports; shoppers who pay do so through the simulator (loadtest/lib.js pay).
set -euo pipefail
cd "$(dirname "$0")/.."
export K6_NO_USAGE_REPORT=true
K6_VERSION=v1.8.1
SMOKE=${SMOKE:-1}

k6=$(command -v k6 || true)
if [ -z "$k6" ]; then
  k6="$(go env GOPATH)/bin/k6"
  if [ ! -x "$k6" ] || ! "$k6" version 2>/dev/null | grep -q "${K6_VERSION#v}"; then
    echo "== k6: go install go.k6.io/k6@$K6_VERSION (once, about two minutes)"
    go install "go.k6.io/k6@$K6_VERSION"
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

go build -o bin/api ./cmd/api
port=$(free_port)
kport=$(free_port)
sport=$(free_port) # the payment simulator the api starts: purchases pay through it
prefix="k6-$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n'):"
admin=$(head -c18 /dev/urandom | od -An -tx1 | tr -d ' \n')
log=$(mktemp)
unset KAFKA_BROKERS
# k6 is thousands of shoppers from one address: the per-address connection cap (256 by default,
# a flood guard) would refuse most of them, as would the login limits.
FLASHSALE_HTTP_ADDR="127.0.0.1:$port" \
FLASHSALE_REDIS_PREFIX="$prefix" \
FLASHSALE_EMBEDDED_KAFKA_ADDR="127.0.0.1:$kport" \
FLASHSALE_PAYMENT_PROVIDER=sim \
FLASHSALE_PAYMENT_SIM_ADDR="127.0.0.1:$sport" \
FLASHSALE_ADMIN_TOKEN="$admin" \
FLASHSALE_JWT_SECRET="$(head -c32 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
FLASHSALE_LIMIT_LOGIN_IP=off \
FLASHSALE_LIMIT_LOGIN_USER=off \
FLASHSALE_HTTP_MAX_CONNS_PER_CLIENT=100000 \
  ./bin/api >"$log" 2>&1 &
api=$!
cleanup() {
  kill "$api" 2>/dev/null && wait "$api" 2>/dev/null || true
  # The run's keys only: everything under its random prefix.
  redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "${prefix}*" | xargs -r -n 500 redis-cli -h 127.0.0.1 -p 6379 unlink >/dev/null
  # K6_API_LOG=file keeps the api's log of the run (to look into a failed request).
  if [ -n "${K6_API_LOG:-}" ]; then cp "$log" "$K6_API_LOG"; fi
  rm -f "$log"
}
trap cleanup EXIT

for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  if ! kill -0 "$api" 2>/dev/null; then cat "$log"; echo "k6: the api did not start"; exit 1; fi
  sleep 0.1
done
curl -fs "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$log"; echo "k6: the api is not ready"; exit 1; }

status=0
# K6_SCENARIOS picks scenarios (default: all). The waiting room's (queue.js) puts 2,000 shoppers
# in line in the smoke and 10,000 in the full run; QUEUE_SHOPPERS=n sets another size (e.g.
# SMOKE=1 QUEUE_SHOPPERS=10000 for the issue's 10,000 with the smoke's short sale).
scenarios=${K6_SCENARIOS:-"loadtest/spike.js loadtest/steady.js loadtest/reads.js loadtest/restock.js loadtest/queue.js"}
for s in $scenarios; do
  echo "== k6 $s (SMOKE=$SMOKE)"
  if ! "$k6" run --quiet --no-usage-report \
      -e BASE_URL="http://127.0.0.1:$port" -e ADMIN_TOKEN="$admin" -e SMOKE="$SMOKE" \
      -e SIM_URL="http://127.0.0.1:$sport" \
      -e SHOPPERS="${QUEUE_SHOPPERS:-}" "$s"; then
    echo "k6: $s failed its thresholds or checks"; status=1
  fi
done
if grep -q '"level":"ERROR"' "$log"; then
  echo "k6: the api logged errors:"; grep '"level":"ERROR"' "$log" | head -20; status=1
fi
exit $status
