#!/usr/bin/env bash
# The browser suite: the shopper and admin pages in headless Chromium against a real api and
# the real Redis. Installs Debian's chromium (and node/npm) with apt-get and the npm packages of
# web/e2e when they are missing, starts bin/api on a free port under a random Redis key prefix
# (settling payment outside) and a second one taking payment through the payment simulator,
# runs web/e2e/e2e.mjs, then stops the apis and deletes the prefix's keys.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
need_apt=()
[ -x /usr/lib/chromium/chromium ] || [ -x /usr/bin/chromium ] || need_apt+=(chromium)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v curl >/dev/null || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "web-e2e: installing ${need_apt[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -d web/e2e/node_modules/playwright-core ]; then
  echo "web-e2e: installing npm packages in web/e2e" >&2
  (cd web/e2e && { npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error; })
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "web-e2e: Redis does not answer on 127.0.0.1:6379; start it with ./scripts/services.sh" >&2
  exit 1
fi

go build -o bin/api ./cmd/api

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
port=$(free_port)
kafka_port=$(free_port)
prefix="e2e$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n'):"
admin_token="e2e-admin-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
jwt_secret="e2e-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')" # the monitor step mints shoppers' tokens
log=$(mktemp)
ttl=30 # seconds to pay: long enough for the pay step, short enough to watch an expiry

api_pid=""
cleanup() {
  status=$?
  for pid in $api_pid ${pay_pid:-}; do
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  redis-cli -h 127.0.0.1 -p 6379 --scan --pattern "${prefix}*" |
    xargs -r -n 500 redis-cli -h 127.0.0.1 -p 6379 del >/dev/null || true
  if [ $status -ne 0 ]; then
    echo "web-e2e: api log (last 40 lines):" >&2
    tail -n 40 "$log" >&2 || true
  fi
  rm -f "$log"
  exit $status
}
trap cleanup EXIT INT TERM

FLASHSALE_HTTP_ADDR="127.0.0.1:$port" \
FLASHSALE_PAYMENT_PROVIDER=none \
FLASHSALE_REDIS_PREFIX="$prefix" \
FLASHSALE_ADMIN_TOKEN="$admin_token" \
FLASHSALE_JWT_SECRET="$jwt_secret" \
FLASHSALE_EMBEDDED_KAFKA_ADDR="127.0.0.1:$kafka_port" \
FLASHSALE_RESERVATION_TTL="${ttl}s" \
FLASHSALE_SNAPSHOT_INTERVAL="200ms" \
FLASHSALE_LIMIT_PURCHASE="1/1m:4" \
FLASHSALE_LIMIT_PAY="1/6s:5" \
FLASHSALE_LIMIT_CANCEL="1/6s:5" \
FLASHSALE_LIMIT_RATING="1/6s:5" \
  ./bin/api >"$log" 2>&1 &
api_pid=$!

# A second api takes payment through the payment simulator it starts: short reservations, and
# a pm_card_async slower than them but within the processing hold (it holds the reservation).
pay_port=$(free_port)
pay_kafka_port=$(free_port)
sim_port=$(free_port)
sim_key="sk_test_e2e$(head -c12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
pay_ttl=12
pay_async=16
FLASHSALE_HTTP_ADDR="127.0.0.1:$pay_port" \
FLASHSALE_PAYMENT_PROVIDER=sim \
FLASHSALE_PAYMENT_SIM_ADDR="127.0.0.1:$sim_port" \
FLASHSALE_PAYMENT_SIM_API_KEY="$sim_key" \
FLASHSALE_PAYMENT_SIM_ASYNC_DELAY="${pay_async}s" \
FLASHSALE_PAYMENT_PROCESSING_HOLD=60s \
FLASHSALE_REDIS_PREFIX="${prefix}pay:" \
FLASHSALE_ADMIN_TOKEN="$admin_token" \
FLASHSALE_JWT_SECRET="$jwt_secret" \
FLASHSALE_EMBEDDED_KAFKA_ADDR="127.0.0.1:$pay_kafka_port" \
FLASHSALE_RESERVATION_TTL="${pay_ttl}s" \
FLASHSALE_SNAPSHOT_INTERVAL="200ms" \
  ./bin/api >>"$log" 2>&1 &
pay_pid=$!

base="http://127.0.0.1:$port"
pay_base="http://127.0.0.1:$pay_port"
for url in "$base" "$pay_base"; do
  for _ in $(seq 100); do
    curl -fsS "$url/readyz" >/dev/null 2>&1 && break
    kill -0 "$api_pid" 2>/dev/null && kill -0 "$pay_pid" 2>/dev/null || { echo "web-e2e: an api exited" >&2; exit 1; }
    sleep 0.1
  done
  curl -fsS "$url/readyz" >/dev/null
done

echo "== web e2e (headless Chromium) against $base"
E2E_PAY_URL="$pay_base" E2E_PAY_SIM_URL="http://127.0.0.1:$sim_port" E2E_PAY_SIM_KEY="$sim_key" E2E_PAY_TTL_S="$pay_ttl" E2E_PAY_ASYNC_S="$pay_async" \
E2E_BASE_URL="$base" E2E_ADMIN_TOKEN="$admin_token" E2E_RESERVATION_TTL_S="$ttl" E2E_JWT_SECRET="$jwt_secret" \
E2E_ARTIFACTS="$root/test-artifacts" E2E_SCREENSHOTS="$root/docs/screenshots" \
  node web/e2e/e2e.mjs
