#!/usr/bin/env bash
# The newcomer's path, end to end: the release binary with no arguments
# serves on 127.0.0.1:8080 with the embedded defaults, a token minted by
# `switchboard token` lists the `demo` model, the console's page is served, a
# page on a local dev server's origin passes CORS, and SIGTERM stops it with
# exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${CARGO_TARGET_DIR:-target}/release/switchboard"
cargo build --release --locked
env -u SWITCHBOARD_CONFIG -u SWITCHBOARD_LISTEN -u SWITCHBOARD_REDIS_URL "$bin" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  if curl -fsS http://127.0.0.1:8080/healthz >/dev/null 2>&1; then break; fi
  kill -0 "$pid" || { echo "switchboard exited at start-up" >&2; exit 1; }
  sleep 0.1
done
curl -fsS http://127.0.0.1:8080/healthz
echo
token=$("$bin" token --tenant dev --subject newcomer)
models=$(curl -fsS -H "Authorization: Bearer $token" http://127.0.0.1:8080/api/model)
echo "$models"
[[ "$models" == *'"demo"'* ]] || { echo "demo model not listed" >&2; exit 1; }
curl -fsS -o /dev/null http://127.0.0.1:8080/console || { echo "the console is not served" >&2; exit 1; }
preflight=$(curl -fsS -o /dev/null -D - -X OPTIONS http://127.0.0.1:8080/v1/sessions \
  -H 'Origin: http://localhost:5173' -H 'Access-Control-Request-Method: POST' \
  -H 'Access-Control-Request-Headers: authorization,content-type')
[[ "${preflight,,}" == *'access-control-allow-origin: http://localhost:5173'* ]] \
  || { echo "a local page's preflight was not allowed: $preflight" >&2; exit 1; }
kill -TERM "$pid"
wait "$pid"
trap - EXIT
echo "smoke test passed"
