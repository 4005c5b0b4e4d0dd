#!/usr/bin/env bash
# The benchmark's one command (bench/README.md): build the release binaries, make sure
# PostgreSQL is running and pgbench is installed, run the bench, print the table and write
# bench-results/<UTC timestamp>.json. Arguments go to the bench binary (--help lists them).
#
# On a machine where others build too, take the cargo lock around the whole run, so that
# no build competes with the measurements: flock /tmp/mcp-connect-cargo.lock bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n== %s\n' "$*" >&2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@"
}

# --- Release build (not part of the measured run) ---------------------------------------
log "release build: cargo build --release -p mcp-connect -p mcp-connect-bench"
build_start=$(date +%s)
cargo build --release -p mcp-connect -p mcp-connect-bench
echo "release build took $(( $(date +%s) - build_start )) s" >&2

# --- PostgreSQL and pgbench, as .ci/run sets them up ------------------------------------
export DATABASE_URL="${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}"
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  log "installing PostgreSQL"
  apt_install postgresql postgresql-client
fi
# Debian ships pgbench with the server package (postgresql-NN) up to 15 and with the
# client package after; /usr/bin/pgbench is only a wrapper, so ask it for its version.
if ! pgbench --version >/dev/null 2>&1; then
  log "installing pgbench"
  apt_install postgresql postgresql-contrib
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  log "starting PostgreSQL"
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432 >&2
if ! psql "$DATABASE_URL" -qAtc 'select 1' >/dev/null 2>&1; then
  # A fresh Debian cluster asks for a password over TCP: give the postgres role the one
  # DATABASE_URL uses (on a trust-auth cluster this step never runs).
  log "setting the postgres role's password for TCP logins"
  $SUDO runuser -u postgres -- psql -qc "ALTER USER postgres PASSWORD 'postgres'"
fi
pgbench --version >&2

# --- oha, the load generator the bench's own is checked against -----------------------
# A pinned version: the bench reads its JSON output. Installed outside the workspace's
# target directory (cargo install builds in a temporary one unless told otherwise).
OHA_VERSION=1.16.0
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
if ! command -v oha >/dev/null 2>&1; then
  log "installing oha $OHA_VERSION: cargo install oha --locked"
  env -u CARGO_TARGET_DIR cargo install oha --locked --version "$OHA_VERSION"
fi
oha --version >&2

# --- wrk, the saturating loops' load generator (Debian's package) ----------------------
if ! command -v wrk >/dev/null 2>&1; then
  log "installing wrk"
  apt_install wrk
fi
# wrk -v prints its version and exits with 1.
{ wrk -v || true; } 2>&1 | head -n 1 >&2

# --- The key stores' rows: Debian's SoftHSM2 and moto's KMS, as scripts/test installs them --
if ! command -v softhsm2-util >/dev/null 2>&1; then
  log "installing softhsm2"
  apt_install --no-install-recommends softhsm2
fi
if ! .venv-moto/bin/pip freeze 2>/dev/null | diff -q - <(grep -v '^#' tests/moto-requirements.txt) >/dev/null; then
  log "installing moto into .venv-moto (tests/moto-requirements.txt)"
  python3 -m venv .venv-moto 2>/dev/null || { apt_install python3-venv; python3 -m venv .venv-moto; }
  .venv-moto/bin/pip install -q -r tests/moto-requirements.txt
fi
# The bench's own SoftHSM2 tokens (the bench writes the file on its first run).
mkdir -p bench-results/softhsm2
export SOFTHSM2_CONF="$PWD/bench-results/softhsm2/softhsm2.conf"

# Databases left by an interrupted run (a run in progress keeps its database: DROP
# without FORCE refuses one that is in use).
psql "$DATABASE_URL" -qAtc "select datname from pg_database where datname like 'mcpc\_bench\_%'" |
  while read -r db; do [ -n "$db" ] && psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS \"$db\"" 2>/dev/null || true; done

# --- The run --------------------------------------------------------------------------
log "benchmark"
run_start=$(date +%s)
"${CARGO_TARGET_DIR:-target}/release/mcp-connect-bench" "$@"
echo "benchmark run took $(( $(date +%s) - run_start )) s" >&2
