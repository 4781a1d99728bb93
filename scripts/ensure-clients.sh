#!/usr/bin/env bash
# Installs the npm clients the integration tests drive (clients/: the AI SDK,
# both ai@6 and ai@7 under the aliases ai6 and ai7, and the AG-UI packages,
# pinned by clients/package-lock.json) with `npm ci`, unless node_modules was
# installed from this very lock file (a digest of it is kept beside the
# install: a checkout's or a cache's timestamps say nothing of its content).
# Needs node >= 20 and the npm registry. ai@7 declares node >= 22; its chat
# client runs on 20 as the tests use it, and npm only warns.
set -euo pipefail
cd "$(dirname "$0")/../clients"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed for the client tests (tests/api/clients.rs)" >&2
  exit 1
fi
stamp=node_modules/.switchboard-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -d node_modules/ai6 && -d node_modules/ai7 ]]; then
  exit 0
fi
echo "installing the npm clients (npm ci in clients/)" >&2
npm ci --no-audit --no-fund --loglevel=error
echo "$want" >"$stamp"
