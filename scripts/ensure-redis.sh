#!/usr/bin/env bash
# Makes sure a Redis answers on 127.0.0.1:6379: installs Debian's redis-server
# if it is missing and starts it (no persistence) if nothing answers. Also
# installs openssl, with which the TLS tests make their certificates.
set -euo pipefail

if ! command -v openssl >/dev/null 2>&1; then
  echo "installing openssl from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
fi

redis_answers() {
  # PING over bash's /dev/tcp, so redis-cli is not needed to ask.
  { exec 3<>/dev/tcp/127.0.0.1/6379; } 2>/dev/null || return 1
  printf 'PING\r\n' >&3
  local reply=""
  read -r -t 2 reply <&3 || true
  exec 3<&- 3>&-
  [[ "$reply" == "+PONG"* ]]
}

if redis_answers; then
  exit 0
fi
if ! command -v redis-server >/dev/null 2>&1; then
  echo "installing redis-server from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
echo "starting redis-server on 127.0.0.1:6379" >&2
redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no >/dev/null
for _ in $(seq 1 50); do
  if redis_answers; then
    exit 0
  fi
  sleep 0.1
done
echo "redis-server did not answer on 127.0.0.1:6379" >&2
exit 1
