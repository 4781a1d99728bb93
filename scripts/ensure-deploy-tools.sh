#!/usr/bin/env bash
# Makes sure the tools deploy/validate.sh takes from Debian's packages are
# installed: nginx (for `nginx -t`) and shellcheck. The Python tools it
# installs itself, into a virtualenv under target/.
set -euo pipefail

missing=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
if ((${#missing[@]})); then
  echo "installing ${missing[*]} from Debian's packages" >&2
  apt-get update -qq
  # The package's service is not started (no init system here; policy-rc.d).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
