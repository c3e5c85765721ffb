#!/usr/bin/env bash
# Start the api (with the embedded Kafka-protocol broker unless KAFKA_BROKERS is set) and the
# reconciler, load a small demo catalogue into an empty shop (FLASHSALE_DEMO_CATALOGUE=false
# turns that off) and print the pages' addresses. Ctrl-C stops both and exits 0.
# The api keeps serving when the reconciler gives up (the sale needs only Redis and Kafka);
# the script says so loudly, and the events wait in Kafka until a reconciler reads them.
set -uo pipefail
cd "$(dirname "$0")/.."

addr=${FLASHSALE_HTTP_ADDR:-127.0.0.1:8080}
base="http://$addr"
# The admin token: the one set, or one made here so this script can load the demo catalogue
# and print it (the api would make and print its own otherwise).
if [ -z "${FLASHSALE_ADMIN_TOKEN:-}" ]; then
  FLASHSALE_ADMIN_TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  export FLASHSALE_ADMIN_TOKEN
fi

# The embedded broker's login: KAFKA_USERNAME/KAFKA_PASSWORD when set (passed on to both), else
# the deployment's own, made by whichever binary starts first and kept beside the broker's log.
kafka_addr=${FLASHSALE_EMBEDDED_KAFKA_ADDR:-127.0.0.1:9092}
kafka_login=${XDG_CACHE_HOME:-$HOME/.cache}/flashsale/kafka-${kafka_addr//:/_}/credentials.json
[ -n "${KAFKA_USERNAME:-}" ] && kafka_login="KAFKA_USERNAME/KAFKA_PASSWORD"
[ -n "${KAFKA_BROKERS:-}" ] && kafka_login="KAFKA_BROKERS's own"

api_pid="" rec_pid=""
# Ctrl-C reaches every process of the terminal's group: the api and the reconciler shut down
# by themselves (a second signal would make them exit at once), so only wait for them. A TERM
# sent to this script alone is passed on.
finish() {
  trap '' INT TERM
  [ "${1:-}" = TERM ] && kill -TERM $api_pid $rec_pid 2>/dev/null
  local rc=0
  if [ -n "$api_pid" ]; then wait "$api_pid"; rc=$?; fi
  [ -n "$rec_pid" ] && wait "$rec_pid" 2>/dev/null
  # An api stopped by the signal exits 0; anything else is worth make's "Error".
  exit "$rc"
}
trap 'finish INT' INT
trap 'finish TERM' TERM

# The reconciler's database (the default DSN names `flashsale`); created once if missing.
if [ -z "${FLASHSALE_POSTGRES_DSN:-}" ] &&
  ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = 'flashsale'" 2>/dev/null | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database flashsale' || echo "run: could not create database flashsale" >&2
fi

./bin/api &
api_pid=$!
# The reconciler reads from the api's embedded broker (unless KAFKA_BROKERS is set): start it
# once the api listens.
until curl -fsS "$base/healthz" >/dev/null 2>&1; do
  if ! kill -0 "$api_pid" 2>/dev/null; then
    wait "$api_pid"; rc=$?
    echo "run: the api did not start (exit $rc; its last line above says why)" >&2
    exit "$rc"
  fi
  sleep 0.1
done

# The reconciler in a subshell of its own that reports when it gives up.
# (A background job starts with SIGINT ignored; the binaries catch it anyway.)
(
  ./bin/reconciler
  rc=$?
  if [ "$rc" -ne 0 ] && kill -0 "$api_pid" 2>/dev/null; then
    {
      echo
      echo "################################################################################"
      echo "# run: THE RECONCILER STOPPED (exit $rc): its last line above says why."
      echo "# The api keeps selling; events wait in Kafka, none are written to PostgreSQL"
      echo "# until a reconciler runs again: fix the cause, then ./bin/reconciler"
      echo "################################################################################"
      echo
    } >&2
  fi
) &
rec_pid=$!

./scripts/demo-catalogue.sh "$base" "$FLASHSALE_ADMIN_TOKEN"

cat >&2 <<EOF

flashsale is running (Ctrl-C stops it):
  shop:     $base/
  admin:    $base/admin
  monitor:  $base/admin/monitor
  admin token: $FLASHSALE_ADMIN_TOKEN
  Kafka login: $kafka_login

EOF

wait "$api_pid"
rc=$?
echo "run: the api stopped (exit $rc)" >&2
kill -TERM "$rec_pid" 2>/dev/null
wait "$rec_pid" 2>/dev/null
exit "$rc"
