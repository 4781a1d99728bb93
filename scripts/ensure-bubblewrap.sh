#!/usr/bin/env bash
# Makes sure bubblewrap (`bwrap`, the sandbox of the bash tool and of the
# rlm REPL's exec) is installed, from Debian's packages. The sandbox tests
# need it; so does a gateway whose tenants have `bash`.
set -euo pipefail

if ! command -v bwrap >/dev/null 2>&1 && [[ ! -x /usr/bin/bwrap ]]; then
  echo "installing bubblewrap from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
fi
