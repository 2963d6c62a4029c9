#!/usr/bin/env bash
# Runs the whole service (all roles in one process, embedded ClickHouse under DATA_DIR).
# Usage: ./scripts/run.sh            (settings from the environment; see docs/operations.md "Configuration")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ./scripts/setup.sh

export DATA_DIR="${DATA_DIR:-$PWD/.data}"
mkdir -p "$DATA_DIR"
if [ -z "${OPERATOR_TOKEN:-}" ]; then
  # A generated operator token, kept so it survives restarts.
  if [ ! -s "$DATA_DIR/operator-token" ]; then
    (umask 077; node -e 'console.log(require("crypto").randomBytes(24).toString("base64url"))' > "$DATA_DIR/operator-token")
  fi
  OPERATOR_TOKEN="$(cat "$DATA_DIR/operator-token")"
  export OPERATOR_TOKEN
  echo "run: OPERATOR_TOKEN not set; using the one in $DATA_DIR/operator-token"
fi
if [ -z "${WEBHOOK_ENCRYPTION_KEY:-}" ]; then
  # A generated key that seals webhook signing secrets at rest, kept so they stay readable.
  if [ ! -s "$DATA_DIR/webhook-encryption-key" ]; then
    (umask 077; node -e 'console.log(require("crypto").randomBytes(32).toString("hex"))' > "$DATA_DIR/webhook-encryption-key")
  fi
  WEBHOOK_ENCRYPTION_KEY="$(cat "$DATA_DIR/webhook-encryption-key")"
  export WEBHOOK_ENCRYPTION_KEY
  echo "run: WEBHOOK_ENCRYPTION_KEY not set; using the one in $DATA_DIR/webhook-encryption-key"
fi
# The Node options of src/shared/node-flags.ts (a unit test checks they match).
exec node --max-semi-space-size=64 dist/src/main.js "$@"
