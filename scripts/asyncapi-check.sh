#!/usr/bin/env bash
# The Kafka events' document, docs/asyncapi.yaml: valid AsyncAPI 3 and in step with
# internal/events (scripts/asyncapi/check.mjs says how). The AsyncAPI parser (the validation
# engine of the AsyncAPI CLI, without the CLI's 1.5 GB of studio and generators) and ajv are
# installed from scripts/asyncapi/package-lock.json into scripts/asyncapi/node_modules (ignored
# by git; about 20 s the first time), with Debian's nodejs/npm when they are missing.
# Run by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=scripts/asyncapi

need_apt=()
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "asyncapi-check: installing ${need_apt[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# Installed again whenever the lock file differs from the one of the last install.
stamp=$dir/node_modules/.installed-package-lock.json
if ! cmp -s "$dir/package-lock.json" "$stamp"; then
  echo "asyncapi-check: installing the AsyncAPI parser in $dir/node_modules" >&2
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$dir/package-lock.json" "$stamp"
fi

node "$dir/check.mjs" "$PWD"
