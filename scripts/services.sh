#!/usr/bin/env bash
# Make sure Redis and PostgreSQL answer on 127.0.0.1, installing Debian's packages when they
# are missing and starting them when they are down. Used by `make run` and `make test`.
set -euo pipefail

# PostgreSQL answering on 127.0.0.1:5432, however it was started (Debian's pg_ctlcluster,
# Homebrew, a container, pg_ctl): pg_isready when there is one, else a bare TCP connect.
pg_up() {
  if command -v pg_isready >/dev/null; then pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null
  else (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; fi
}

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
# The server package only when no PostgreSQL runs and Debian's tools to start one are missing.
pg_up || command -v pg_ctlcluster >/dev/null || need_apt+=(postgresql)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v curl >/dev/null || need_apt+=(curl)
command -v psql >/dev/null || need_apt+=(postgresql-client)
installed_pg=""
case " ${need_apt[*]} " in *" postgresql "*) installed_pg=1 ;; esac
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "services: installing ${need_apt[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "services: starting redis-server on 127.0.0.1:6379" >&2
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

if ! pg_up; then
  ver=$(ls /etc/postgresql 2>/dev/null | sort -n | tail -n1)
  if [ -z "$ver" ] || ! command -v pg_ctlcluster >/dev/null; then
    echo "services: PostgreSQL is not answering on 127.0.0.1:5432 and there is no Debian cluster to start;" >&2
    echo "          start yours (pg_ctl start, brew services start postgresql, a container) and run again" >&2
    exit 1
  fi
  echo "services: starting PostgreSQL $ver" >&2
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  for _ in $(seq 100); do pg_up && break; sleep 0.1; done
fi
# A PostgreSQL this script just installed is a local development database: let the postgres
# user in from 127.0.0.1 without a password (Debian's default asks for one). An existing
# installation is never changed.
if [ -n "$installed_pg" ]; then
  ver=$(ls /etc/postgresql | sort -n | tail -n1)
  hba=/etc/postgresql/$ver/main/pg_hba.conf
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO sed -i '1i host all postgres 127.0.0.1/32 trust\nhost all postgres ::1/128 trust' "$hba"
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$ver" main reload || true
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
  echo "services: cannot connect to PostgreSQL as postgres on 127.0.0.1 without a password;" >&2
  echo "          set FLASHSALE_POSTGRES_DSN or allow trust auth for 127.0.0.1 in pg_hba.conf" >&2
fi
redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
pg_up
