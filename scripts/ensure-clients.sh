#!/usr/bin/env bash
# Installs the npm clients the integration tests drive (clients/: the AI SDK
# and AG-UI packages, pinned by clients/package-lock.json) when they are
# missing or older than the lock file. Needs node >= 20 and the npm registry.
set -euo pipefail
cd "$(dirname "$0")/../clients"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm are needed for the client tests (tests/api/clients.rs)" >&2
  exit 1
fi
installed=node_modules/.package-lock.json
if [[ -f "$installed" && "$installed" -nt package-lock.json ]]; then
  exit 0
fi
echo "installing the npm clients (npm ci in clients/)" >&2
npm ci --no-audit --no-fund --loglevel=error
