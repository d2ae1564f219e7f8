"""The Helm chart (helm/frexport), checked with the real tools: helm v3.17.3 lint and template for
every ci/*-values.yaml, Kubernetes' own schemas (kubernetes-validate --strict, 1.29 and the newest),
the prometheus-operator CRD schemas (node), promtool on the rendered PrometheusRule, assertions on
the rendered objects, the chart as a dependency of another chart, and the rendered pod's commands
run for real (sidecar, agent injection, trainer wrapper) on a local torchrun job.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.request

import pytest
import yaml

from tests.support import paths
from tests.support.helm_tools import (  # noqa: E402
    CHART,
    HADOLINT,
    HELM_VERSION,
    ROOT,
    Helm,
    container,
    docs_of,
    env_map,
    find,
    flatten,
    kubernetes_validate,
    kubernetes_validate_versions,
    one,
    require,
    validate_crds,
)
from tests.support.ports import free_port
from tests.support.torchjob import require_torch  # noqa: E402

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
VARIANTS = [p.name[: -len("-values.yaml")] for p in CI_VALUES]
RULES = paths.RULES
RULES_TEST = ROOT / "tests" / "prometheus" / "frexport-rules.test.yaml"
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
SIDECAR_ARGS = ["serve", "--sockets-dir", "/shared/frexport", "--dump-dir", "/shared/frexport/dumps",
                "--evidence-dir", "/shared/frexport/evidence", "--listen", "0.0.0.0:9464"]
SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.fixture(scope="module")
def helm(tmp_path_factory):
    h = Helm(tmp_path_factory.mktemp("helm-home"))
    version = h.run("version", "--short").stdout.strip()
    assert version.startswith(HELM_VERSION + "+"), f"{h.path} is {version}, not helm {HELM_VERSION}"
    return h


@pytest.fixture(scope="module")
def rendered(helm, tmp_path_factory):
    """variant -> (rendered file, documents) for every ci/*-values.yaml."""
    out_dir = tmp_path_factory.mktemp("rendered")
    result = {}
    for variant, values in zip(VARIANTS, CI_VALUES):
        text = helm.template("-f", str(values))
        path = out_dir / f"{variant}.yaml"
        path.write_text(text)
        result[variant] = (path, docs_of(text))
    # Plus the example with every other value at its default.
    text = helm.template("--set", "example.enabled=true")
    (out_dir / "default-example.yaml").write_text(text)
    result["default-example"] = (out_dir / "default-example.yaml", docs_of(text))
    assert {"minimal", "native-sidecar-off", "monitors-off", "pyspy-on", "otlp-on", "example"} <= set(result)
    return result


def pod_spec(docs):
    return one(docs, "Job")["spec"]["template"]["spec"]


def sidecar_of(spec):
    """(the frexport sidecar container, native?)"""
    native = [c for c in spec.get("initContainers", []) if c["name"] == "frexport"]
    classic = [c for c in spec["containers"] if c["name"] == "frexport"]
    assert len(native) + len(classic) == 1, "exactly one frexport sidecar"
    return (native or classic)[0], bool(native)


# --- helm lint / template / package ------------------------------------------------------------------

@pytest.mark.parametrize("values", CI_VALUES, ids=VARIANTS)
def test_helm_lint_strict(helm, values):
    out = helm.run("lint", "--strict", str(CHART), "-f", str(values))
    assert "0 chart(s) failed" in out.stdout


def test_every_variant_renders_what_it_should(rendered):
    kinds = {v: sorted(d["kind"] for d in docs) for v, (_, docs) in rendered.items()}
    n = len(DASHBOARDS)
    assert kinds["minimal"] == sorted(["PodMonitor", "PrometheusRule"] + ["ConfigMap"] * n)
    assert kinds["monitors-off"] == []
    for v in ("native-sidecar-off", "pyspy-on", "example", "default-example"):
        expected = ["PodMonitor", "PrometheusRule", "Job", "Service", "ConfigMap"] + ["ConfigMap"] * n
        assert kinds[v] == sorted(expected), v
    assert kinds["otlp-on"] == sorted(["ServiceMonitor", "Service", "PrometheusRule", "Job", "Service", "ConfigMap"]
                                      + ["ConfigMap"] * n)


def test_package_follows_the_symlinks(helm, tmp_path):
    """files/frexport-rules.yaml and dashboards/ are symlinks: the packaged chart carries their content."""
    assert (CHART / "files" / "frexport-rules.yaml").is_symlink() and (CHART / "dashboards").is_symlink()
    helm.run("package", str(CHART), "-d", str(tmp_path))
    with tarfile.open(tmp_path / "frexport-0.1.0.tgz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        rules = members["frexport/files/frexport-rules.yaml"]
        assert rules.isfile()
        assert tar.extractfile(rules).read() == RULES.read_bytes()
        for d in DASHBOARDS:
            assert tar.extractfile(members[f"frexport/dashboards/{d.name}"]).read() == d.read_bytes()
        assert not [n for n in members if n.endswith(".py") and "/dashboards/" in n], "generator left out"
        for name in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/NOTES.txt"):
            assert f"frexport/{name}" in members


# --- schemas: Kubernetes core kinds, prometheus-operator CRDs -------------------------------------------

def test_kubernetes_validate_strict_1_29_and_newest(rendered):
    versions = kubernetes_validate_versions()
    newest = versions[-1]
    assert "1.29.0" in versions
    files = [p for p, docs in rendered.values() if any(not d["apiVersion"].startswith("monitoring.coreos.com/")
                                                       for d in docs)]
    core = sum(1 for _, docs in rendered.values() for d in docs if not d["apiVersion"].startswith("monitoring."))
    for version in ("1.29.0", newest):
        out = kubernetes_validate(files, version)
        assert out.returncode == 0, f"kubernetes-validate --strict -k {version}:\n{out.stdout}\n{out.stderr}"
        assert out.stdout.count("INFO") >= core, out.stdout  # one line per validated core object
        assert "ERROR" not in out.stdout


def test_kubernetes_validate_catches_an_unknown_field(rendered, tmp_path):
    """Negative control: strict validation rejects a field Kubernetes does not know."""
    path, _ = rendered["example"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("restartPolicy: Always",
                                            "restartPolicy: Always\n          bogusField: 1", 1))
    out = kubernetes_validate([bad], "1.29.0")
    assert out.returncode != 0 and "bogusField" in out.stdout


def test_monitoring_objects_match_the_crd_schemas(rendered, tmp_path):
    files = [p for p, docs in rendered.values()]
    out = validate_crds(files)
    assert out.returncode == 0, out.stdout + out.stderr
    expected = sum(1 for _, docs in rendered.values() for d in docs if d["apiVersion"].startswith("monitoring."))
    assert f"checked {expected}" in out.stdout and expected >= 8
    # Negative control: a malformed duration is caught.
    bad = tmp_path / "bad.yaml"
    bad.write_text(rendered["minimal"][0].read_text().replace("interval: 15s", "interval: five minutes"))
    out = validate_crds([bad])
    assert out.returncode == 1 and "INVALID" in out.stdout and "interval" in out.stdout


# --- alert rules: one source, promtool ------------------------------------------------------------------

def test_prometheusrule_is_the_config_rules_file(rendered):
    spec = one(rendered["minimal"][1], "PrometheusRule")["spec"]
    assert spec == yaml.safe_load(RULES.read_text())
    # Helm left the alert templates alone.
    text = rendered["minimal"][0].read_text()
    assert "{{ $labels.rank }}" in text and "{{ $value | humanizeDuration }}" in text


def _promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (scripts/setup.sh does)")
    return path


def test_rendered_rules_pass_promtool_check_and_the_same_unit_tests(rendered, tmp_path):
    promtool = _promtool()
    spec = one(rendered["minimal"][1], "PrometheusRule")["spec"]
    # The same layout as the repository, so tests/prometheus/frexport-rules.test.yaml applies unchanged
    # (its rule_files entry is ../../config/prometheus/frexport-rules.yaml).
    rules = tmp_path / "config" / "prometheus" / "frexport-rules.yaml"
    rules.parent.mkdir(parents=True)
    rules.write_text(yaml.safe_dump(spec, sort_keys=False))
    test_file = tmp_path / "tests" / "prometheus" / RULES_TEST.name
    test_file.parent.mkdir(parents=True)
    shutil.copy(RULES_TEST, test_file)
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert out.returncode == 0 and "SUCCESS: 9 rules found" in out.stdout, out.stdout + out.stderr
    out = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_rule_overrides_runbook_base_and_extra_labels(rendered, tmp_path):
    spec = one(rendered["example"][1], "PrometheusRule")["spec"]
    rules = [r for g in spec["groups"] for r in g["rules"]]
    assert len(rules) == 8
    for r in rules:
        assert r["annotations"]["runbook_url"] == "https://wiki.example.com/frexport/runbooks#" + r["alert"].lower()
        assert r["labels"]["team"] == "ml-infra" and r["labels"]["severity"] in ("critical", "warning")
        assert "{{ $labels." in r["annotations"]["summary"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# --- the sidecar in the pod ---------------------------------------------------------------------------

def test_native_sidecar_by_default(rendered):
    spec = pod_spec(rendered["default-example"][1])
    sidecar, native = sidecar_of(spec)
    assert native and sidecar["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["initContainers"]] == ["frexport-init", "frexport"]
    assert "restartPolicy" not in spec["initContainers"][0]  # the preparation step runs to completion first
    assert sidecar["command"] == ["frexport"] and sidecar["args"] == SIDECAR_ARGS
    assert sidecar["image"] == "ghcr.io/frexport/frexport:0.1.0"
    assert sidecar["ports"] == [{"name": "frexport-metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "frexport-metrics"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "frexport-metrics"}
    assert sidecar["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]
    assert sidecar["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"},
                                    "limits": {"cpu": "500m", "memory": "256Mi"}}
    trainer = container(spec["containers"], "trainer")
    assert trainer["command"][:4] == ["/opt/frexport-agent/bin/frexport-launch", "--dir", "/shared/frexport", "--"]
    assert trainer["command"][4:8] == ["torchrun", "--nnodes", "2", "--nproc-per-node"]
    assert trainer["command"][8:11] == ["1", "--node-rank", "$(JOB_COMPLETION_INDEX)"]
    job = one(rendered["default-example"][1], "Job")["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == 2
    svc = one(rendered["default-example"][1], "Service", "t-frexport-example")["spec"]
    assert svc["clusterIP"] == "None" and spec["subdomain"] == "t-frexport-example"
    assert "t-frexport-example-0.t-frexport-example" in trainer["command"]


def test_classic_sidecar_when_native_is_off(rendered):
    spec = pod_spec(rendered["native-sidecar-off"][1])
    sidecar, native = sidecar_of(spec)
    assert not native and "restartPolicy" not in sidecar
    assert [c["name"] for c in spec["initContainers"]] == ["frexport-init"]
    assert [c["name"] for c in spec["containers"]] == ["trainer", "frexport"]
    assert sidecar["command"][:2] == ["/bin/sh", "-c"] and sidecar["args"] == SIDECAR_ARGS
    assert "/shared/frexport/.trainer-exited" in sidecar["command"][2] and "exit 0" in sidecar["command"][2]
    trainer = container(spec["containers"], "trainer")
    script = trainer["command"][2]
    assert "frexport-launch --dir /shared/frexport --" in script and "touch /shared/frexport/.trainer-exited" in script


@pytest.mark.parametrize("variant", ["default-example", "example", "native-sidecar-off", "pyspy-on", "otlp-on"])
def test_sidecar_shares_the_volume_and_the_trainer_is_wired(rendered, variant):
    spec = pod_spec(rendered[variant][1])
    sidecar, _ = sidecar_of(spec)
    trainer = container(spec["containers"], "trainer")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["frexport-shared"] == {"name": "frexport-shared", "emptyDir": {"sizeLimit": "2Gi"}}
    mount = {"name": "frexport-shared", "mountPath": "/shared/frexport"}
    assert mount in sidecar["volumeMounts"] and mount in trainer["volumeMounts"]
    assert mount in spec["initContainers"][0]["volumeMounts"]
    assert {"name": "frexport-agent", "mountPath": "/opt/frexport-agent", "readOnly": True} in trainer["volumeMounts"]
    env = env_map(trainer)
    assert env["FREXPORT_AGENT_DIR"] == "/shared/frexport"
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == "/shared/frexport/dumps/trace_"
    assert env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == "/shared/frexport/dumps/trace_"
    # The sidecar reads what the trainer writes: one group for the volume, the sockets and the sidecar.
    assert spec["securityContext"]["fsGroup"] == 65532 == sidecar["securityContext"]["runAsGroup"]


@pytest.mark.parametrize("variant", ["example", "native-sidecar-off", "pyspy-on", "otlp-on"])
def test_downward_api_env(rendered, variant):
    sidecar, _ = sidecar_of(pod_spec(rendered[variant][1]))
    env = env_map(sidecar)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["FREXPORT_JOB_ID"] == {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-name']"}}
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == \
        "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),k8s.node.name=$(NODE_NAME)"
    # gloo dumps do not say how many ranks the job has: the value tells the traces' resource
    assert env.get("FREXPORT_WORLD_SIZE") == ("2" if variant == "otlp-on" else None)
    names = [e["name"] for e in sidecar["env"]]
    assert names.index("OTEL_RESOURCE_ATTRIBUTES") > max(names.index(n) for n in ("POD_NAME", "POD_NAMESPACE",
                                                                                   "NODE_NAME"))


@pytest.mark.parametrize("variant", ["default-example", "example", "native-sidecar-off", "otlp-on"])
def test_secure_by_default(rendered, variant):
    path, docs = rendered[variant]
    spec = pod_spec(docs)
    sidecar, _ = sidecar_of(spec)
    assert sidecar["securityContext"] == SECURITY
    assert spec["initContainers"][0]["securityContext"] == SECURITY
    assert "shareProcessNamespace" not in spec
    assert "SYS_PTRACE" not in path.read_text()
    assert env_map(sidecar)["FREXPORT_EVIDENCE__PYSPY"] == "false"
    assert spec["automountServiceAccountToken"] is False


def test_pyspy_adds_ptrace_and_a_shared_process_namespace(rendered):
    spec = pod_spec(rendered["pyspy-on"][1])
    sidecar, _ = sidecar_of(spec)
    assert spec["shareProcessNamespace"] is True
    assert sidecar["securityContext"] == {**SECURITY, "capabilities": {"drop": ["ALL"], "add": ["SYS_PTRACE"]}}
    trainer = container(spec["containers"], "trainer")
    assert trainer["securityContext"]["capabilities"] == {"add": ["SYS_PTRACE"]}
    assert "FREXPORT_EVIDENCE__PYSPY" not in env_map(sidecar)  # frexport's default: ask for py-spy stacks
    assert spec["initContainers"][0]["securityContext"] == SECURITY  # the preparation step gets nothing extra


def test_otlp_env(rendered):
    sidecar, _ = sidecar_of(pod_spec(rendered["otlp-on"][1]))
    env = env_map(sidecar)
    assert env["FREXPORT_TRACES__ENABLED"] == "true"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_SERVICE_NAME"] == "llm-pretrain"
    assert env["FREXPORT_TRACES__CHECKPOINT_FILE"] == "/shared/frexport/otlp-checkpoint.json"
    for variant in ("example", "minimal"):
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in rendered[variant][0].read_text()


def test_extra_args_env_and_gpu(rendered):
    spec = pod_spec(rendered["example"][1])
    sidecar, _ = sidecar_of(spec)
    assert sidecar["args"] == SIDECAR_ARGS + ["--log-format", "json", "--stall-after", "2m", "--poll-interval", "10s"]
    assert env_map(sidecar)["FREXPORT_ANALYSIS__MIN_STALL_AFTER"] == "1m"
    trainer = container(spec["containers"], "trainer")
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert env_map(trainer)["TORCH_NCCL_ENABLE_TIMING"] == "1"
    assert env_map(trainer)["EXAMPLE_BACKEND"] == "nccl"


@pytest.mark.parametrize("variant", ["example", "native-sidecar-off", "pyspy-on", "otlp-on"])
def test_frexport_accepts_the_rendered_arguments_and_environment(rendered, variant):
    """The real CLI parses the sidecar's args and FREXPORT_*/OTEL_* env (downward API values filled in)."""
    sidecar, _ = sidecar_of(pod_spec(rendered[variant][1]))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FREXPORT_", "OTEL_"))}
    env.update(_resolve_env(sidecar, {"metadata.name": "p-0", "metadata.namespace": "ml", "spec.nodeName": "n1",
                                      "metadata.labels['batch.kubernetes.io/job-name']": "t-frexport-example"}))
    frexport = ROOT / ".venv" / "bin" / "frexport"
    out = subprocess.run([str(frexport), *sidecar["args"], "--check-config"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


# --- monitors, dashboards, labels -----------------------------------------------------------------------

def test_podmonitor_selects_the_sidecar_pods_and_names_the_job(rendered):
    docs = rendered["example"][1]
    pm = one(docs, "PodMonitor")
    assert pm["spec"]["jobLabel"] == "batch.kubernetes.io/job-name"
    pod_labels = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    ep = pm["spec"]["podMetricsEndpoints"][0]
    assert ep["port"] == "frexport-metrics" and ep["path"] == "/metrics"
    assert ep["interval"] == "15s" and ep["scrapeTimeout"] == "10s"
    assert ep["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    assert ep["metricRelabelings"][0]["action"] == "drop"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["ml"]}
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_servicemonitor_and_its_service(rendered):
    docs = rendered["otlp-on"][1]
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service", "t-frexport-metrics")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    pod_labels = one(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items() and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"][0]["targetPort"] == "frexport-metrics"
    relabel = sm["spec"]["endpoints"][0]["relabelings"][0]
    assert relabel == {"sourceLabels": ["__meta_kubernetes_pod_label_batch_kubernetes_io_job_name"],
                       "regex": "(.+)", "targetLabel": "job", "action": "replace"}
    assert not find(docs, "PodMonitor")


def test_additional_labels(rendered):
    docs = rendered["example"][1]
    for d in [one(docs, "PodMonitor"), one(docs, "PrometheusRule")] + [
            d for d in find(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]:
        assert d["metadata"]["labels"]["release"] == "kube-prometheus-stack", d["metadata"]["name"]
    for d in rendered["minimal"][1]:
        assert "release" not in d["metadata"]["labels"]


def test_one_dashboard_configmap_per_json(rendered):
    assert len(DASHBOARDS) >= 1, "dashboards/*.json"
    cms = [d for d in find(rendered["minimal"][1], "ConfigMap")]
    assert len(cms) == len(DASHBOARDS)
    by_key = {k: (cm, v) for cm in cms for k, v in cm["data"].items()}
    for path in DASHBOARDS:
        cm, text = by_key[path.name]
        assert text == path.read_text() and json.loads(text)
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert "annotations" not in cm["metadata"]
    for cm in find(rendered["example"][1], "ConfigMap"):
        if "grafana_dashboard" in cm["metadata"]["labels"]:
            assert cm["metadata"]["annotations"] == {"grafana_folder": "Training"}


def test_dashboards_found_in_the_folder(helm, tmp_path):
    """A new dashboards/*.json becomes a ConfigMap without touching the chart."""
    chart = tmp_path / "frexport"
    shutil.copytree(CHART, chart, symlinks=False)
    (chart / "dashboards" / "extra_board.json").write_text('{"title": "extra", "panels": []}')
    docs = docs_of(helm.template("--show-only", "templates/dashboards.yaml", "--set", "dashboards.label=dash",
                                 "--set", "dashboards.labelValue=yes", chart=chart))
    cm = one(docs, "ConfigMap", "t-frexport-extra-board")
    assert cm["data"] == {"extra_board.json": '{"title": "extra", "panels": []}'}
    assert cm["metadata"]["labels"]["dash"] == "yes"
    assert len(docs) == len(DASHBOARDS) + 1


# --- values schema, Kubernetes version guard ------------------------------------------------------------

@pytest.mark.parametrize("setting, message", [
    ("sidecar.port=notanint", "sidecar.port"),
    ("sidecar.mode=classic", "mode"),
    ("sidecar.native=maybe", "sidecar.native"),
    ("traces.otlp.protocol=udp", "traces.otlp.protocol"),
    ("podMonitor.interval=5 minutes", "podMonitor.interval"),
    ("image.digest=latest", "image.digest"),
    ("example.nodes=0", "example.nodes"),
    ("sidecar.logFormat=xml", "sidecar.logFormat"),
    ("jobLabel=not a label", "jobLabel"),
    ("worldSize=0", "worldSize"),
])
def test_schema_rejects_bad_values(helm, setting, message):
    out = helm.run("lint", str(CHART), "--set", setting, check=False)
    assert out.returncode != 0, f"helm lint accepted {setting}"
    assert message in out.stdout + out.stderr


def test_native_sidecar_needs_kubernetes_1_29(helm):
    out = helm.run("template", "t", str(CHART), "--set", "example.enabled=true", "--kube-version", "1.28.9",
                   check=False)
    assert out.returncode != 0 and "sidecar.native needs Kubernetes >= 1.29" in out.stderr
    helm.template("--set", "example.enabled=true", "--set", "sidecar.native=false", "--kube-version", "1.28.9")
    helm.template("--set", "example.enabled=true", "--kube-version", "1.29.0")


def test_notes_name_the_release_label_trap(helm, tmp_path):
    chart = tmp_path / "frexport"
    shutil.copytree(CHART, chart, symlinks=False)
    # NOTES.txt renders only on install; its body is the named template frexport.notes.
    (chart / "templates" / "zz-notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        "  notes: {{ include \"frexport.notes\" . | toJson }}\n")

    def notes(*a):
        return one(docs_of(helm.template("--show-only", "templates/zz-notes.yaml", *a, chart=chart)),
                   "ConfigMap")["data"]["notes"]

    text = notes()
    assert "release: <kube-prometheus-stack release name>" in text
    assert "port-forward" in text and "curl -s http://127.0.0.1:9464/metrics" in text
    labelled = notes("--set", "podMonitor.additionalLabels.release=kps", "--set",
                     "prometheusRule.additionalLabels.release=kps")
    assert "WARNING" not in labelled
    assert (CHART / "templates" / "NOTES.txt").read_text().strip() == '{{ include "frexport.notes" . }}'


def test_readme_documents_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = [k for k in flatten(values) if f"`{k}`" not in readme]
    assert not missing, f"values without a row in helm/frexport/README.md: {missing}"
    assert "release: kube-prometheus-stack" in readme and "Building and pushing the image" in readme


# --- the image ------------------------------------------------------------------------------------------

def test_dockerfile_passes_hadolint_and_matches_the_chart():
    """No Docker engine here: the Dockerfile is linted (hadolint) and checked against what the chart
    expects; its build steps are the same pip install the venv of this repository uses."""
    out = subprocess.run([str(require(HADOLINT, "hadolint")), str(ROOT / "Dockerfile")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11\.\d+-slim-bookworm$", text, re.M)  # an exact tag
    assert "USER 65532:65532" in text and "--uid 65532" in text
    assert 'ENTRYPOINT ["frexport"]' in text and 'CMD ["serve", "--help"]' in text
    assert "pip install --no-cache-dir" in text and "EXPOSE 9464" in text
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*"):][:4] == ["*", "!pyproject.toml", "!README.md", "!frexport/"]


# --- the chart as a dependency of a user's chart -------------------------------------------------------------

PARENT_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {{ .Release.Name }}-train
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    metadata:
      labels: {{- include "frexport.pod.labels" $ | nindent 8 }}
    spec:
      restartPolicy: Never
      securityContext: {{- include "frexport.pod.securityContext" $ | nindent 8 }}
      {{- include "frexport.pod.shareProcessNamespace" $ | nindent 6 }}
      initContainers: {{- include "frexport.sidecar.initContainers" $ | nindent 8 }}
      containers:
        - name: trainer
          image: my-trainer:1
          command: {{- include "frexport.trainer.command" (dict "root" $ "command" (list "torchrun" "train.py")) | nindent 12 }}
          env: {{- include "frexport.trainer.env" $ | nindent 12 }}
          volumeMounts: {{- include "frexport.trainer.volumeMounts" $ | nindent 12 }}
        {{- include "frexport.sidecar.containers" $ | nindent 8 }}
      volumes: {{- include "frexport.sidecar.volumes" $ | nindent 8 }}
"""


@pytest.mark.parametrize("native", [True, False], ids=["native", "classic"])
def test_named_templates_from_a_parent_chart(helm, tmp_path, native):
    parent = tmp_path / "trainer"
    (parent / "templates").mkdir(parents=True)
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: trainer\nversion: 1.2.3\nappVersion: \"9.9.9\"\n"
        "dependencies:\n  - name: frexport\n    version: 0.1.0\n")
    (parent / "values.yaml").write_text(yaml.safe_dump({"frexport": {
        "sharedDir": "/mnt/fr", "sidecar": {"port": 9500, "native": native},
        "podMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}, "dashboards": {"enabled": False}}}))
    (parent / "templates" / "job.yaml").write_text(PARENT_JOB)
    shutil.copytree(CHART, parent / "charts" / "frexport", symlinks=False)
    text = helm.template(chart=parent)
    docs = docs_of(text)
    assert [d["kind"] for d in docs] == ["Job"]
    spec = pod_spec(docs)
    sidecar, is_native = sidecar_of(spec)
    assert is_native == native
    assert sidecar["image"] == "ghcr.io/frexport/frexport:0.1.0"  # the frexport chart's appVersion, not 9.9.9
    assert sidecar["args"][:9] == ["serve", "--sockets-dir", "/mnt/fr", "--dump-dir", "/mnt/fr/dumps",
                                   "--evidence-dir", "/mnt/fr/evidence", "--listen", "0.0.0.0:9500"]
    assert env_map(container(spec["containers"], "trainer"))["FREXPORT_AGENT_DIR"] == "/mnt/fr"
    assert one(docs, "Job")["spec"]["template"]["metadata"]["labels"] == {"frexport.io/sidecar": "true"}
    path = tmp_path / "parent.yaml"
    path.write_text(text)
    out = kubernetes_validate([path], "1.29.0")
    assert out.returncode == 0, out.stdout + out.stderr


# --- the rendered pod, run for real -------------------------------------------------------------------------

def _resolve_env(c: dict, fields: dict[str, str]) -> dict[str, str]:
    """The container's env as the kubelet would set it: fieldRefs from `fields`, $(VAR) expanded."""
    env: dict[str, str] = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        else:
            env[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def _scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.read().decode()
    except OSError:
        return ""


@pytest.mark.torchjob
def test_rendered_pod_runs_a_real_torchrun_job(helm, tmp_path):
    """The example pod (classic sidecar: the most moving parts) run as the kubelet would, on this
    machine: the init step copies the agent out of the 'image' (here: .venv), the sidecar runs its
    rendered shell wrapper and `frexport serve` args, the trainer runs its rendered command
    (frexport-launch wrapper from the injected agent, torchrun, 2 ranks); the sidecar reads both ranks
    over their sockets, and exits 0 after the trainer's exit marker, as the Job needs."""
    require_torch()
    shared, agent = tmp_path / "shared", tmp_path / "agent"
    text = helm.template("--set", "example.enabled=true", "--set", "example.nodes=1", "--set",
                         "example.nprocPerNode=2", "--set", "example.steps=60", "--set", "sidecar.native=false",
                         "--set", "sidecar.drainSeconds=1", "--set", f"sharedDir={shared}", "--set",
                         f"agent.mountPath={agent}")
    spec = pod_spec(docs_of(text))
    venv_bin = str(ROOT / ".venv" / "bin")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("FREXPORT_", "OTEL_", "TORCH_"))}
    base_env["PATH"] = venv_bin + os.pathsep + base_env.get("PATH", "")
    base_env.pop("PYTHONPATH", None)

    # 1. The preparation init container ("/frexport-agent" is its mount of the agent volume).
    init = spec["initContainers"][0]
    assert init["command"][:2] == ["python", "-c"]
    script = init["command"][2].replace('"/frexport-agent"', repr(str(agent)))
    subprocess.run([sys.executable, "-c", script], check=True, env=base_env, timeout=60)
    assert (shared / "dumps").is_dir() and (shared / "dumps").stat().st_mode & 0o1777 == 0o1777
    launcher = agent / "bin" / "frexport-launch"
    assert os.access(launcher, os.X_OK) and (agent / "frexport" / "agent" / "__init__.py").is_file()

    # 2. The sidecar, as rendered (only the listen address moves to a free loopback port).
    sidecar, native = sidecar_of(spec)
    assert not native
    port = free_port()
    args = [a.replace("0.0.0.0:9464", f"127.0.0.1:{port}") for a in sidecar["args"]]
    fields = {"metadata.name": "t-frexport-example-0-x", "metadata.namespace": "ml", "spec.nodeName": "node-a",
              "metadata.labels['batch.kubernetes.io/job-name']": "t-frexport-example"}
    side = subprocess.Popen([*sidecar["command"], *args], env={**base_env, **_resolve_env(sidecar, fields)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    trainer_proc = None
    try:
        # 3. The trainer, as rendered (rendezvous on loopback; the script from the chart's files/).
        trainer = container(spec["containers"], "trainer")
        rdzv = free_port()
        command = [str(ROOT / "helm" / "frexport" / "files" / "example-train.py") if a == "/opt/example/train.py"
                   else "0" if a == "$(JOB_COMPLETION_INDEX)"
                   else "127.0.0.1" if a == "t-frexport-example-0.t-frexport-example"
                   else str(rdzv) if a == "29500" else a for a in trainer["command"]]
        tenv = {**base_env, **_resolve_env(trainer, {}), "EXAMPLE_STEP_SECONDS": "0.1"}
        trainer_proc = subprocess.Popen(command, env=tenv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True)
        metrics, deadline = "", time.monotonic() + 90
        wanted = [r'frexport_source_up{source="socket:rank-0"} 1.0', r'frexport_source_up{source="socket:rank-1"} 1.0']
        while time.monotonic() < deadline and trainer_proc.poll() is None:
            metrics = _scrape(port)
            if all(w in metrics for w in wanted) and re.search(
                    r'frexport_pg_last_completed_collective\{[^}]*rank="1"[^}]*\} [1-9]', metrics):
                break
            time.sleep(0.5)
        assert all(w in metrics for w in wanted), metrics or "no scrape"
        assert re.search(r'frexport_pg_last_completed_collective\{[^}]*rank="1"[^}]*\} [1-9]', metrics), metrics
        out, _ = trainer_proc.communicate(timeout=120)
        assert trainer_proc.returncode == 0, out
        assert (shared / ".trainer-exited").exists()
        assert json.loads((shared / "rank-1.json").read_text())["mode"] == "worker_server"
        # 4. The classic sidecar sees the marker, drains, stops frexport and exits 0.
        side_out, _ = side.communicate(timeout=30)
        assert side.returncode == 0, side_out
        assert "stopped" in side_out
    finally:
        for p in (trainer_proc, side):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
