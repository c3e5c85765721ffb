#!/usr/bin/env bash
# Start the api (with the embedded Kafka-protocol broker unless KAFKA_BROKERS is set) and
# the reconciler; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
pids=()
trap 'kill ${pids[@]} 2>/dev/null; wait' INT TERM EXIT
./bin/api & pids+=($!)
if [ -x ./bin/reconciler ]; then
  sleep 1
  ./bin/reconciler & pids+=($!)
fi
wait -n
