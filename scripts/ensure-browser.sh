#!/usr/bin/env bash
# Makes sure the real-browser test (tests/browser/) can run: Debian's
# chromium and nginx (from Debian's packages, when missing), and the pinned
# playwright-core in tests/browser/ (npm ci, unless node_modules was installed
# from this very lock file). Never downloads a browser through npm:
# playwright-core drives the system's /usr/bin/chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null 2>&1 || [[ -x /usr/bin/chromium ]] || missing+=(chromium)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
if ((${#missing[@]})); then
  echo "installing ${missing[*]} from Debian's packages" >&2
  apt-get update -qq
  # Services are not started (no init system here; policy-rc.d).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed for the browser test (tests/browser/)" >&2
  exit 1
fi
cd tests/browser
stamp=node_modules/.switchboard-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d node_modules/playwright-core ]]; then
  exit 0
fi
echo "installing playwright-core (npm ci in tests/browser/)" >&2
# playwright-core has no install script and downloads no browser.
npm ci --no-audit --no-fund --loglevel=error
echo "$want" >"$stamp"
