#!/usr/bin/env bash
# kill -9 trials at scale: the CI fault test (tests/faults/kill9_trials.rs)
# with a count. Each trial starts a tool-using turn on one of three real
# replica processes sharing a Redis of the test's own, kill -9s the owner at
# a random point (after N events, at the Nth tool call, or after a random
# delay), restarts it at once or after the turn, and checks the rejoining
# client's log (no gap, no repeat, the whole answer, every tool that ran has
# its tool_call and tool_result, `charge` never ran twice, every re-run of
# `lookup` carried the same Idempotency-Key).
#
#   load-tests/failover.sh [TRIALS] [SEED]      # default 100 trials, a fresh seed
#
# Prints one line per trial and the summary; the last lines are what
# RESULTS.md records.
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-100}
seed=${2:-$(date +%s%N)}
scripts/ensure-redis.sh >/dev/null
FAULT_TRIALS=$trials FAULT_SEED=$seed exec cargo test --locked --test faults \
  a_tool_using_turn_survives_kill9_of_its_owner_at_random_points_in_every_trial -- --nocapture
