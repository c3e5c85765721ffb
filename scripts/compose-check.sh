#!/usr/bin/env bash
# Validate docker-compose.yml (and the cluster override) with Debian's docker-compose, using
# the values of .env.example; also check the files hold no secret of their own: without an
# env file they must refuse to render. Needs no Docker daemon. Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v docker-compose >/dev/null; then
  echo "compose-check: installing Debian's docker-compose" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
fi

empty=$(mktemp)
trap 'rm -f "$empty"' EXIT
for files in "-f docker-compose.yml" "-f docker-compose.yml -f docker-compose.cluster.yml"; do
  # shellcheck disable=SC2086 # word splitting of $files is intended
  env -i PATH="$PATH" HOME="${HOME:-/root}" docker-compose --env-file .env.example $files config -q
  # shellcheck disable=SC2086
  if env -i PATH="$PATH" HOME="${HOME:-/root}" docker-compose --env-file "$empty" $files config -q 2>/dev/null; then
    echo "compose-check: $files renders without .env: a secret or required setting has a default" >&2
    exit 1
  fi
done
echo "compose-check: docker-compose.yml and docker-compose.cluster.yml are valid"
