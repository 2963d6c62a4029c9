#!/usr/bin/env bash
# Ensure a Chromium binary for the browser tests (test/e2e), from Debian's `chromium` package.
#
# Looks for $CHROMIUM_PATH, then `chromium`, `chromium-browser`, /usr/bin/chromium. When none
# is found: as root, installs Debian's package (apt-get update first when the package lists
# do not know it yet); otherwise prints the exact command to run and exits 1.
#
# On success prints one line: the absolute path of the binary (the tests read it).
# Everything else goes to stderr. Idempotent.
set -euo pipefail

log() { printf 'ensure-chromium: %s\n' "$*" >&2; }

find_chromium() {
  local c
  if [ -n "${CHROMIUM_PATH:-}" ] && [ -x "${CHROMIUM_PATH}" ]; then
    printf '%s\n' "${CHROMIUM_PATH}"
    return 0
  fi
  for c in chromium chromium-browser; do
    if command -v "$c" >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  for c in /usr/bin/chromium /usr/lib/chromium/chromium; do
    if [ -x "$c" ]; then
      printf '%s\n' "$c"
      return 0
    fi
  done
  return 1
}

if path="$(find_chromium)"; then
  printf '%s\n' "$path"
  exit 0
fi

if [ -n "${CHROMIUM_PATH:-}" ]; then
  log "CHROMIUM_PATH=${CHROMIUM_PATH} is not an executable file; looked for Debian's chromium too"
fi

if [ "$(id -u)" -ne 0 ]; then
  log "no Chromium found. Install Debian's package:"
  log "  sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium"
  log "(or set CHROMIUM_PATH to a Chromium/Chrome binary)"
  exit 1
fi

command -v apt-get >/dev/null 2>&1 || { log "no Chromium found and no apt-get on this machine; set CHROMIUM_PATH"; exit 1; }

export DEBIAN_FRONTEND=noninteractive
if ! apt-cache show chromium >/dev/null 2>&1; then
  log "apt-get update"
  apt-get update -qq >&2
fi
log "installing Debian's chromium (apt-get install -y --no-install-recommends chromium)"
apt-get install -y -qq --no-install-recommends chromium >&2

if path="$(find_chromium)"; then
  printf '%s\n' "$path"
  exit 0
fi
log "chromium was installed but no binary was found"
exit 1
