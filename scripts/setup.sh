#!/usr/bin/env bash
# Shared set-up for run.sh and test.sh: checks Node.js, makes sure Redis and NATS
# (JetStream) are reachable (installing/starting them locally when needed), installs npm
# dependencies when missing or out of date, and builds. Sourced, not executed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v node >/dev/null 2>&1 || ! node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)'; then
  echo "setup: Node.js 20 or newer with npm is required (found: $(node --version 2>/dev/null || echo none))." >&2
  echo "       Install it from https://nodejs.org or NodeSource's Debian packages, then run this again." >&2
  exit 1
fi

./scripts/ensure-services.sh

# Install when node_modules is missing or older than the lock file. `npm install`, not
# `npm ci`: chdb lists optional per-platform packages that the registry does not have
# (e.g. @chdb/lib-darwin-x64 is a 404), so no lock file can hold them and `npm ci` refuses;
# `npm install` follows the lock for everything that exists.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund
fi
npm run --silent build
