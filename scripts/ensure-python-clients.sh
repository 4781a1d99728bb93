#!/usr/bin/env bash
# Installs the Python clients and servers the tests run (clients/requirements.txt:
# mcp-server-time with the `mcp` SDK it needs, and the `openai` SDK) into clients/.venv-py,
# unless that venv was installed from this very requirements file (a digest of
# it is kept beside the install). Needs python3 (>= 3.10) with venv, and PyPI.
set -euo pipefail
cd "$(dirname "$0")/../clients"

venv=.venv-py
stamp=$venv/.switchboard-requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x $venv/bin/python ]]; then
  exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "python3 is needed for the MCP and OpenAI SDK tests (tests/api/mcp.rs, responses.rs)" >&2
  exit 1
fi
echo "installing the Python clients (pip in clients/$venv)" >&2
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r requirements.txt
echo "$want" >"$stamp"
