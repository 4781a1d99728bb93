#!/usr/bin/env bash
# Builds the gateway and the load tools with the `profiling` profile: the
# release build with line tables and frame pointers, so `perf record -g`
# gives whole call graphs (the prebuilt standard library has frame pointers
# too). Its own directory, target/profiling/, so it never invalidates the
# release build. Usage: scripts/profiling-build.sh [extra cargo args]
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg tokio_unstable -C force-frame-pointers=yes"
exec cargo build --locked --profile profiling -p switchboard -p switchboard-load --bins "$@"
