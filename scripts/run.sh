#!/usr/bin/env bash
# Start the api (with the embedded Kafka-protocol broker unless KAFKA_BROKERS is set) and
# the reconciler; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait' INT TERM EXIT
# The reconciler's database (the default DSN names `flashsale`); created once if missing.
if [ -z "${FLASHSALE_POSTGRES_DSN:-}" ] &&
  ! psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = 'flashsale'" 2>/dev/null | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database flashsale' || echo "run: could not create database flashsale" >&2
fi
./bin/api & pids+=($!)
# The reconciler reads from the api's embedded broker (unless KAFKA_BROKERS is set): start it
# once the api listens.
addr=${FLASHSALE_HTTP_ADDR:-127.0.0.1:8080}
for _ in $(seq 100); do
  curl -fsS "http://$addr/healthz" >/dev/null 2>&1 && break
  kill -0 "${pids[0]}" 2>/dev/null || break
  sleep 0.1
done
./bin/reconciler & pids+=($!)
wait -n
