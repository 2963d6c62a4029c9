#!/usr/bin/env bash
# Ensure Redis and NATS (with JetStream) are reachable.
#
# Local addresses (127.0.0.1 / localhost / ::1) that are not reachable are
# started here, installing the Debian packages first if needed (root only).
# Remote addresses are only checked, never started.
#
# Env:
#   REDIS_URL  default redis://127.0.0.1:6379
#   NATS_URL   default nats://127.0.0.1:4222 (first entry of a comma list is used)
#   DATA_DIR   default $PWD/.data  (redis/ and nats/ data, logs and pid files)
#
# Idempotent: running it again when both services answer does nothing.
set -euo pipefail

REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379}"
NATS_URL="${NATS_URL:-nats://127.0.0.1:4222}"
DATA_DIR="${DATA_DIR:-$PWD/.data}"
WAIT_SECS=15

log() { printf '%s\n' "$*"; }
die() { printf 'ensure-services: error: %s\n' "$*" >&2; exit 1; }

# parse_url URL DEFAULT_PORT -> sets URL_HOST, URL_PORT
# Handles scheme://[user[:pass]@]host[:port][/path][?query], IPv6 in brackets.
parse_url() {
  local url="$1" default_port="$2" rest hostport
  url="${url%%,*}"                 # first of a comma-separated list
  rest="${url#*://}"               # strip scheme (no-op if none)
  rest="${rest%%/*}"               # strip path
  rest="${rest%%\?*}"              # strip query
  hostport="${rest##*@}"           # strip credentials
  if [[ "$hostport" == \[* ]]; then
    URL_HOST="${hostport#[}"; URL_HOST="${URL_HOST%%]*}"
    local after="${hostport#*]}"
    URL_PORT="${after#:}"
  elif [[ "$hostport" == *:* ]]; then
    URL_HOST="${hostport%:*}"
    URL_PORT="${hostport##*:}"
  else
    URL_HOST="$hostport"
    URL_PORT=""
  fi
  URL_HOST="${URL_HOST:-127.0.0.1}"
  URL_PORT="${URL_PORT:-$default_port}"
  [[ "$URL_PORT" =~ ^[0-9]+$ ]] || die "cannot parse port from URL '$1'"
}

is_local() {
  case "$1" in
    127.0.0.1|localhost|::1) return 0 ;;
    *) return 1 ;;
  esac
}

reachable() {
  local host="$1" port="$2"
  timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$host" "$port" 2>/dev/null
}

wait_reachable() {
  local name="$1" host="$2" port="$3" logfile="$4" i
  for ((i = 0; i < WAIT_SECS * 2; i++)); do
    reachable "$host" "$port" && return 0
    sleep 0.5
  done
  {
    echo "ensure-services: error: $name did not become reachable at $host:$port within ${WAIT_SECS}s"
    if [[ -f "$logfile" ]]; then
      echo "--- last lines of $logfile ---"
      tail -n 20 "$logfile" || true
    fi
  } >&2
  exit 1
}

# ensure_binary BINARY PACKAGE
ensure_binary() {
  local bin="$1" pkg="$2"
  command -v "$bin" >/dev/null 2>&1 && return 0
  if [[ "$(id -u)" -eq 0 ]]; then
    log "$pkg: '$bin' not found, installing package $pkg"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg"
    command -v "$bin" >/dev/null 2>&1 || die "'$bin' still not found after installing $pkg"
  else
    {
      echo "ensure-services: error: '$bin' is not installed and this script is not running as root."
      echo "Install it with:"
      echo "  sudo apt-get install -y redis-server nats-server"
    } >&2
    exit 1
  fi
}

# JetStream check (warning only). Prefer the monitoring port if curl is there
# and it answers; otherwise read the INFO line the server sends on connect.
check_jetstream() {
  local host="$1" port="$2" mhost="$1" info
  [[ "$mhost" == *:* ]] && mhost="[$mhost]"
  if command -v curl >/dev/null 2>&1 &&
     curl -fsS --max-time 1 "http://$mhost:8222/healthz?js-enabled-only=true" >/dev/null 2>&1; then
    return 0
  fi
  info="$(timeout 1 bash -c 'exec 3<>"/dev/tcp/$1/$2"; IFS= read -r line <&3; printf "%s" "$line"' _ "$host" "$port" 2>/dev/null || true)"
  if [[ "$info" == INFO* && "$info" != *'"jetstream":true'* ]]; then
    echo "ensure-services: warning: NATS at $host:$port does not advertise JetStream (start it with -js)" >&2
  fi
}

ensure_redis() {
  parse_url "$REDIS_URL" 6379
  local host="$URL_HOST" port="$URL_PORT" dir="$DATA_DIR/redis"
  if reachable "$host" "$port"; then
    log "redis: reachable at $host:$port (already running)"
    return 0
  fi
  is_local "$host" || die "redis at $host:$port (REDIS_URL) is not reachable and is not local; not starting a remote service"

  if ! command -v redis-server >/dev/null 2>&1; then
    ensure_binary redis-server redis-server
    # The Debian package may have started its own (systemd) instance.
    if wait_brief "$host" "$port"; then
      log "redis: reachable at $host:$port (already running)"
      return 0
    fi
  fi

  mkdir -p "$dir"
  redis-server --daemonize yes --bind 127.0.0.1 --port "$port" \
    --dir "$dir" --appendonly yes \
    --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" \
    || die "redis-server failed to start (see $dir/redis.log)"
  wait_reachable redis "$host" "$port" "$dir/redis.log"
  log "redis: reachable at $host:$port (started)"
}

ensure_nats() {
  parse_url "$NATS_URL" 4222
  local host="$URL_HOST" port="$URL_PORT" dir="$DATA_DIR/nats"
  if reachable "$host" "$port"; then
    check_jetstream "$host" "$port"
    log "nats: reachable at $host:$port (already running)"
    return 0
  fi
  is_local "$host" || die "nats at $host:$port (NATS_URL) is not reachable and is not local; not starting a remote service"

  if ! command -v nats-server >/dev/null 2>&1; then
    ensure_binary nats-server nats-server
    if wait_brief "$host" "$port"; then
      check_jetstream "$host" "$port"
      log "nats: reachable at $host:$port (already running)"
      return 0
    fi
  fi

  mkdir -p "$dir"
  # setsid + nohup: detached from this shell's session so it outlives the script.
  setsid nohup nats-server -a 127.0.0.1 -p "$port" -js -sd "$dir" -l "$dir/nats.log" \
    </dev/null >>"$dir/nats.stdout" 2>&1 &
  echo $! >"$dir/nats.pid"
  wait_reachable nats "$host" "$port" "$dir/nats.log"
  check_jetstream "$host" "$port"
  log "nats: reachable at $host:$port (started)"
}

# Short wait (3 s) used right after a package install that may auto-start a service.
wait_brief() {
  local i
  for ((i = 0; i < 6; i++)); do
    reachable "$1" "$2" && return 0
    sleep 0.5
  done
  return 1
}

ensure_redis
ensure_nats
