#!/usr/bin/env bash
# Makes sure a three-primary Redis Cluster answers on 127.0.0.1:7000-7002 (no
# replicas), for the tests' SWITCHBOARD_TEST_REDIS_CLUSTER: installs Debian's
# redis-server if it is missing and starts the cluster with
# scripts/redis-cluster.sh (no persistence, files under
# ${TMPDIR:-/tmp}/switchboard-redis-cluster) unless 7000 answers and says
# cluster_state:ok.
set -euo pipefail
cd "$(dirname "$0")/.."

dir="${TMPDIR:-/tmp}/switchboard-redis-cluster"

# CLUSTER INFO over bash's /dev/tcp, so redis-cli is not needed to ask.
cluster_ok() {
  { exec 3<>/dev/tcp/127.0.0.1/7000; } 2>/dev/null || return 1
  printf 'CLUSTER INFO\r\n' >&3
  local line ok=1
  # A bulk reply ($<length>, then name:value lines), or an error such as
  # "-ERR This instance has cluster support disabled".
  while read -r -t 2 line <&3; do
    line="${line%$'\r'}"
    case "$line" in
      cluster_state:ok) ok=0; break ;;
      cluster_state:* | -*) break ;;
    esac
  done
  exec 3<&- 3>&-
  return "$ok"
}

if cluster_ok; then
  exit 0
fi
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "installing redis-server from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
# A cluster this script started earlier that is no longer ok (a node died):
# start afresh. (redis-cluster.sh refuses a directory it did not make, and
# ports something else answers on.)
if [[ -f "$dir/.switchboard-redis-cluster" ]]; then
  echo "127.0.0.1:7000 is not an ok cluster: stopping the one in $dir" >&2
  scripts/redis-cluster.sh stop --dir "$dir"
fi
echo "starting a three-primary Redis Cluster on 127.0.0.1:7000-7002 in $dir" >&2
scripts/redis-cluster.sh start --dir "$dir" --port 7000 --primaries 3 >/dev/null
