"""Helpers for the chart tests (tests/e2e/helm/): the real helm v3 binary, kubernetes-validate and the
prometheus-operator CRD models, as scripts/install-tools.sh installs them into .tools/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support import paths

ROOT = paths.ROOT
CHART = ROOT / "helm" / "frexport"
TOOLS = Path(os.environ.get("FREXPORT_TOOLS", ROOT / ".tools"))
HELM = TOOLS / "bin" / "helm"
KUBERNETES_VALIDATE = TOOLS / "venv" / "bin" / "kubernetes-validate"
HADOLINT = TOOLS / "venv" / "bin" / "hadolint"
NODE_MODULES = TOOLS / "node" / "node_modules"
HELM_VERSION = "v3.17.3"
INSTALL_HINT = "run ./scripts/install-tools.sh (scripts/setup.sh does)"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
VARIANTS = [p.name[: -len("-values.yaml")] for p in CI_VALUES]
RULES = paths.RULES
RULES_TEST = ROOT / "tests" / "prometheus" / "frexport-rules.test.yaml"
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
SIDECAR_ARGS = ["serve", "--sockets-dir", "/shared/frexport", "--dump-dir", "/shared/frexport/dumps",
                "--evidence-dir", "/shared/frexport/evidence", "--listen", "[::]:9464"]
SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}

# Validates every monitoring.coreos.com object of a multi-document YAML file against the
# prometheus-operator CRD schemas (types, patterns, enums, required fields).
CRD_VALIDATOR = """\
import * as po from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import yaml from "js-yaml";
import fs from "node:fs";
let bad = 0, seen = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of yaml.loadAll(fs.readFileSync(file, "utf8"))) {
    if (!doc || !String(doc.apiVersion).startsWith("monitoring.coreos.com/")) continue;
    seen++;
    const Model = po[doc.kind];
    if (!Model) { bad++; console.log(`UNKNOWN ${file}: ${doc.kind}`); continue; }
    try { new Model(doc).validate(); console.log(`OK ${file}: ${doc.kind}/${doc.metadata.name}`); }
    catch (e) { bad++; console.log(`INVALID ${file}: ${doc.kind}/${doc.metadata.name}: ${e.message}`); }
  }
}
console.log(`checked ${seen}`);
process.exit(bad ? 1 : 0);
"""


def require(path: Path, what: str) -> Path:
    if not path.exists():
        pytest.fail(f"{what} not found at {path}: {INSTALL_HINT}")
    return path


def helm_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"):
        d = home / name.lower()
        d.mkdir(parents=True, exist_ok=True)
        env[name] = str(d)
    env.pop("KUBECONFIG", None)
    return env


class Helm:
    """The real helm binary with scratch HELM_*_HOME directories."""

    def __init__(self, home: Path):
        self.path = require(HELM, f"helm {HELM_VERSION}")
        self.env = helm_env(home)

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([str(self.path), *args], capture_output=True, text=True, env=self.env, timeout=120)
        if check and out.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
        return out

    def template(self, *args: str, chart: Path = CHART, release: str = "t", namespace: str = "ml") -> str:
        return self.run("template", release, str(chart), "--namespace", namespace, *args).stdout


def docs_of(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def find(docs: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def container(containers: list[dict], name: str) -> dict:
    found = [c for c in containers or [] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r} in {[c['name'] for c in containers or []]}"
    return found[0]


def env_map(c: dict) -> dict[str, object]:
    """name -> value, or the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def kubernetes_validate_versions() -> list[str]:
    """Kubernetes versions whose schemas kubernetes-validate bundles, oldest first."""
    require(KUBERNETES_VALIDATE, "kubernetes-validate")
    py = KUBERNETES_VALIDATE.parent / "python"
    out = subprocess.run([str(py), "-c", (
        "import os, kubernetes_validate as k; d = os.path.join(os.path.dirname(k.__file__), 'kubernetes-json-schema');"
        "print('\\n'.join(sorted(n[1:-len('-local-strict')] for n in os.listdir(d) if n.endswith('-local-strict'))))")],
        capture_output=True, text=True, check=True)
    versions = [v for v in out.stdout.split() if v]
    return sorted(versions, key=lambda v: tuple(int(x) for x in v.split(".")))


def kubernetes_validate(files: list[Path], version: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(require(KUBERNETES_VALIDATE, "kubernetes-validate")), "--strict", "-k", version,
                           *map(str, files)], capture_output=True, text=True, timeout=300)


def validate_crds(files: list[Path]) -> subprocess.CompletedProcess:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node not found: apt-get install nodejs")
    require(NODE_MODULES / "@kubernetes-models" / "prometheus-operator", "@kubernetes-models/prometheus-operator")
    with tempfile.TemporaryDirectory() as d:
        # ESM resolves packages from the script's directory upwards: link the tools' node_modules in.
        os.symlink(NODE_MODULES, Path(d) / "node_modules")
        script = Path(d) / "validate-crds.mjs"
        script.write_text(CRD_VALIDATOR)
        return subprocess.run([node, str(script), *map(str, files)], capture_output=True, text=True, timeout=120)


_LEAF_MAPPINGS = ("podLabels", "resources", "securityContext", "livenessProbe", "readinessProbe",
                  "podSecurityContext", "prometheusNamespaceSelector", "prometheusPodSelector", "namespaceSelector")


def flatten(values: dict, prefix: str = "") -> dict[str, object]:
    """Leaf paths of a values mapping (empty mappings and lists count as leaves)."""
    out = {}
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v and k not in _LEAF_MAPPINGS:
            out.update(flatten(v, path + "."))
        else:
            out[path] = v
    return out


def pod_spec(docs: list[dict]) -> dict:
    """The pod spec of the one Job among the documents."""
    return one(docs, "Job")["spec"]["template"]["spec"]


def sidecar_of(spec: dict) -> tuple[dict, bool]:
    """(the frexport sidecar container, native?)"""
    native = [c for c in spec.get("initContainers", []) if c["name"] == "frexport"]
    classic = [c for c in spec["containers"] if c["name"] == "frexport"]
    assert len(native) + len(classic) == 1, "exactly one frexport sidecar"
    return (native or classic)[0], bool(native)


def resolve_env(c: dict, fields: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet would set it: fieldRefs from `fields`, $(VAR) expanded."""
    env: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        else:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def secret_mounts(c: dict, spec: dict, docs: list[dict], tmp: Path, tls_dir: Path) -> dict[str, Path]:
    """Where each Secret mount of container `c` lands on this machine, as the kubelet lays it out."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    out = {}
    for m in c["volumeMounts"]:
        secret = volumes[m["name"]].get("secret")
        if not secret:
            continue
        d = tmp / m["name"]
        d.mkdir()
        rendered = [s for s in docs if s["kind"] == "Secret" and s["metadata"]["name"] == secret["secretName"]]
        if rendered:
            for key, value in rendered[0]["stringData"].items():
                (d / key).write_text(value)
        else:  # the TLS Secret comes from cert-manager or the user
            for f in tls_dir.iterdir():
                (d / f.name).write_bytes(f.read_bytes())
        out[m["mountPath"]] = d
    return out


def scrape_metrics(port: int) -> str:
    """A plain scrape of a sidecar on this machine; "" while it is not up yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""
