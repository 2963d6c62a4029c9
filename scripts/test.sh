#!/usr/bin/env bash
# Runs the whole test suite against real Redis, NATS JetStream and the embedded ClickHouse
# engine, starting Redis/NATS when they are not running. Ends with one line:
#   N passed, N failed
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ./scripts/setup.sh
# The tests are type-checked too (tsconfig.test.json, no output): tap runs .ts without checking types.
npm run --silent typecheck

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
npx tap "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# tap's closing line: "# { total: N, pass: N, fail: N, ... }"
summary="$(grep -E '^# \{ total: ' "$log" | tail -n 1)"
pass="$(sed -nE 's/.*pass: ([0-9]+).*/\1/p' <<<"$summary")"
fail="$(sed -nE 's/.*fail: ([0-9]+).*/\1/p' <<<"$summary")"
# What failed, again at the end (CI keeps only the output's tail): each failing test point with
# its diagnostics, and each failing test file's lines from its services' logs (logsOnFailure).
if [ "${fail:-0}" != "0" ] || [ "$status" -ne 0 ]; then
  echo "# ---- failures (repeated from above) ----"
  awk '
    /^[[:space:]]*not ok / { show = 40; print; next }
    show > 0 { print; show--; if ($0 ~ /^[[:space:]]*\.\.\.$/) show = 0 }
  ' "$log" | head -n 400
  awk '/^--- failed: / { keep = 1; print; next } keep && /^(\{|\(none\))/ { print; next } { keep = 0 }' "$log" | tail -n 160
  echo "# ---- end of failures ----"
fi
echo "${pass:-0} passed, ${fail:-0} failed"
if [ -z "$summary" ] && [ "$status" -eq 0 ]; then status=1; fi
exit "$status"
