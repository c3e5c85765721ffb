#!/usr/bin/env bash
# Writes the .env of docker-compose.yml from .env.example, giving every empty secret (a name
# ending in _PASSWORD, _SECRET or _TOKEN) its own random value: 32 random bytes in hex. Never
# overwrites a file; the new one is readable by its owner only.
#   ./scripts/dotenv.sh [FILE]      (default: .env beside docker-compose.yml)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out=${1:-$root/.env}
if [ -e "$out" ]; then
  echo "dotenv: $out exists; not overwriting it" >&2
  exit 1
fi
umask 077
while IFS= read -r line || [ -n "$line" ]; do
  if [[ $line =~ ^([A-Z0-9_]*_(PASSWORD|SECRET|TOKEN))=$ ]]; then
    line="${BASH_REMATCH[1]}=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
  fi
  printf '%s\n' "$line"
done <"$root/.env.example" >"$out"
echo "dotenv: wrote $out with fresh secrets"
