"""The chart's job-level view (jobView): a headless Service over one Job's sidecars, the sidecars' peers
endpoint, and `frexport jobview` as a Deployment. Validated strictly, its command run for real.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.helm_tools import (
    CHART,
    container,
    docs_of,
    find,
    kubernetes_validate,
    kubernetes_validate_versions,
    one,
    pod_spec,
    secret_mounts,
    sidecar_of,
)

JOBVIEW = CHART / "ci" / "jobview-values.yaml"
JOB = "t-frexport-example"
UNAUTH = ("--set", "example.enabled=true", "--set", "jobView.enabled=true",
          "--set", "jobView.allowUnauthenticated=true")
# Labels the Job controller adds to every pod it creates (besides the template's).
JOB_POD_LABELS = ("batch.kubernetes.io/job-name", "job-name", "batch.kubernetes.io/controller-uid", "controller-uid",
                  "batch.kubernetes.io/job-completion-index")


def _jobview_objects(docs: list[dict]) -> list[dict]:
    return [d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "jobview"]


def _job_pod_labels(job: dict, index: int) -> dict[str, str]:
    """The labels of pod `index` of `job` as the Job controller creates it."""
    labels = dict(job["spec"]["template"]["metadata"]["labels"])
    name = job["metadata"]["name"]
    labels.update({"batch.kubernetes.io/job-name": name, "job-name": name, "controller-uid": "u",
                   "batch.kubernetes.io/controller-uid": "u", "batch.kubernetes.io/job-completion-index": str(index)})
    return labels


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.fixture(scope="module")
def secure(helm) -> list[dict]:
    return docs_of(helm.template("-f", str(JOBVIEW)))


def test_rendered_objects_validate_strictly_on_1_29_and_newest(helm, tmp_path):
    versions = kubernetes_validate_versions()
    files = []
    for name, args in [("secure", ("-f", str(JOBVIEW))), ("unauthenticated", UNAUTH),
                       ("classic", (*UNAUTH, "--set", "sidecar.native=false")),
                       ("own-job", ("--set", "scope=workload", "--set", "jobView.enabled=true", "--set",
                                    "jobView.jobName=train", "--set", "jobView.allowUnauthenticated=true"))]:
        docs = docs_of(helm.template(*args))
        kinds = sorted((d["kind"], d["metadata"]["name"]) for d in _jobview_objects(docs))
        job = "train" if name == "own-job" else JOB
        assert kinds == [("Deployment", f"{job}-frexport-jobview"), ("PodMonitor", f"{job}-frexport-jobview"),
                         ("Service", f"{job}-frexport")], name
        core = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump_all(core))
        files.append(f)
    for version in ("1.29.0", versions[-1]):
        out = kubernetes_validate(files, version)
        assert out.returncode == 0 and "ERROR" not in out.stdout, \
            f"kubernetes-validate --strict -k {version}:\n{out.stdout}\n{out.stderr}"


def test_deployment_one_replica_guaranteed_restricted_no_token(secure):
    dep = one(secure, "Deployment", f"{JOB}-frexport-jobview")
    assert dep["spec"]["replicas"] == 1
    spec = dep["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    c = container(spec["containers"], "jobview")
    assert c["resources"]["requests"] == c["resources"]["limits"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["runAsNonRoot"] is True and sc["readOnlyRootFilesystem"] is True
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # basic auth on every path: the kubelet's probes go to tcpSocket, as the sidecar's
    assert c["livenessProbe"]["tcpSocket"] == {"port": "frexport-metrics"}
    # the view's own pod is no peer: not selected by the monitors' podLabels nor by the headless Service
    svc = one(secure, "Service", f"{JOB}-frexport")
    assert not _selects(svc["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"])


def test_headless_service_selects_exactly_the_pods_of_the_example_job(secure):
    svc = one(secure, "Service", f"{JOB}-frexport")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    [port] = svc["spec"]["ports"]
    job = one(secure, "Job", JOB)
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["parallelism"] == 2 == \
        job["spec"]["completions"]
    sidecar, _ = sidecar_of(pod_spec(secure))
    assert port["targetPort"] == "frexport-metrics" and \
        {"name": "frexport-metrics", "containerPort": port["port"], "protocol": "TCP"} in sidecar["ports"]
    selector = svc["spec"]["selector"]
    assert all(_selects(selector, _job_pod_labels(job, i)) for i in range(2))
    # ... and nothing else: another Job's pods with the same sidecar, pods without the sidecar
    other = dict(job, metadata=dict(job["metadata"], name="other-job"))
    assert not _selects(selector, _job_pod_labels(other, 0))
    template_only = dict(job["spec"]["template"]["metadata"]["labels"])
    assert not _selects(selector, template_only), "it must select on the Job's name, not only the sidecar label"
    for key in selector:
        assert key in template_only or key in JOB_POD_LABELS
    # the view asks that Service, in its namespace, on the sidecars' port
    args = container(one(secure, "Deployment")["spec"]["template"]["spec"]["containers"], "jobview")["args"]
    assert args[args.index("--peers-service") + 1] == f"{JOB}-frexport.ml.svc:{port['port']}"
    assert args[args.index("--job-id") + 1] == JOB


def test_every_pod_exports_the_jobs_id(secure):
    sidecar, _ = sidecar_of(pod_spec(secure))
    job_id = next(e for e in sidecar["env"] if e["name"] == "FREXPORT_JOB_ID")
    # the Job's name (the label the Job controller puts on every pod), not the pod's
    assert job_id["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['batch.kubernetes.io/job-name']"


def test_sidecars_serve_the_peers_endpoint_behind_the_web_config(secure, helm):
    args = sidecar_of(pod_spec(secure))[0]["args"]
    assert "--peers-api" in args and "--web-config-file" in args and "--peers-api-unauthenticated" not in args
    args = sidecar_of(pod_spec(docs_of(helm.template(*UNAUTH))))[0]["args"]
    assert "--peers-api" in args and "--peers-api-unauthenticated" in args
    # the NetworkPolicy lets the view reach the sidecars' port
    ingress = one(secure, "NetworkPolicy")["spec"]["ingress"]
    view = [r for r in ingress if any(f.get("podSelector", {}).get("matchLabels", {}).get(
        "app.kubernetes.io/component") == "jobview" for f in r.get("from", []))]
    assert len(view) == 1 and view[0]["ports"] == [{"protocol": "TCP", "port": 9464}]


@pytest.mark.parametrize("settings, message", [
    (("--set", "example.enabled=true", "--set", "jobView.enabled=true"), "jobView.allowUnauthenticated"),
    (("--set", "example.enabled=true", "--set", "sidecar.peersApi=true"), "jobView.allowUnauthenticated"),
    (("--set", "jobView.enabled=true", "--set", "jobView.allowUnauthenticated=true"), "jobView.jobName"),
    (("-f", str(JOBVIEW), "--set", "webConfig.tls.serverName="), "webConfig.tls.serverName"),
    (("-f", str(JOBVIEW), "--set", "webConfig.tls.enabled=false"), "jobView.allowBasicAuthOverHttp"),
])
def test_refused_without_auth_opt_in_job_or_server_name(helm, settings, message):
    out = helm.run("template", "t", str(CHART), *settings, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_schema_rejects_bad_jobview_values(helm):
    for setting, message in [("jobView.port=0", "jobView.port"), ("jobView.pollInterval=often", "pollInterval"),
                             ("jobView.jobName=Not_A_Name", "jobName"), ("jobView.replicas=2", "replicas")]:
        out = helm.run("lint", str(CHART), "--set", setting, check=False)
        assert out.returncode != 0 and message in out.stdout + out.stderr, setting


def test_view_disabled_renders_none_of_it(helm, rendered):
    for variant, (_, docs) in rendered.items():
        if variant == "jobview":
            continue
        assert not _jobview_objects(docs), variant
        assert not [d for d in docs if d["kind"] == "Deployment" and "jobview" in d["metadata"]["name"]]
        for job in find(docs, "Job"):
            assert "--peers-api" not in sidecar_of(job["spec"]["template"]["spec"])[0]["args"], variant
        for np in find(docs, "NetworkPolicy"):
            assert "jobview" not in yaml.safe_dump(np), variant
    assert not _jobview_objects(docs_of(helm.template("--set", "example.enabled=true", "--set",
                                                      "jobView.allowUnauthenticated=true")))


def _check_config(c: dict, spec: dict, docs: list[dict], tmp: Path, tls_dir: Path) -> dict:
    """Run the container's command with --check-config for real, its Secrets laid out here and its
    secretKeyRefs resolved from the rendered Secrets; returns the effective configuration."""
    tmp.mkdir(exist_ok=True)
    mounts = secret_mounts(c, spec, docs, tmp, tls_dir)

    def here(text: str) -> str:
        for mount, host in mounts.items():
            text = text.replace(mount + "/", f"{host}/")
        return text

    for host in mounts.values():  # the web config names the TLS mount's files
        for f in host.iterdir():
            f.write_text(here(f.read_text()))
    env = {"PATH": "/usr/bin:/bin"}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = here(e["value"])
        elif "fieldRef" in e["valueFrom"]:  # the downward API: the Job's name, the pod's
            env[e["name"]] = JOB
        else:
            ref = e["valueFrom"]["secretKeyRef"]
            env[e["name"]] = one(docs, "Secret", ref["name"])["stringData"][ref["key"]]
    assert c["command"] == ["frexport"]
    out = subprocess.run([sys.executable, "-m", "frexport", *map(here, c["args"]), "--check-config"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, f"{c['args']}: {out.stderr}"
    assert "configuration is valid" in out.stderr
    return yaml.safe_load(out.stdout)


def test_jobview_command_passes_check_config(secure, helm, tmp_path, tls_dir):
    spec = one(secure, "Deployment")["spec"]["template"]["spec"]
    c = container(spec["containers"], "jobview")
    assert c["args"][0] == "jobview"
    cfg = _check_config(c, spec, secure, tmp_path, tls_dir)
    peers = cfg["peers"]
    assert peers["service"] == f"{JOB}-frexport.ml.svc:9464" and cfg["job_id"] == JOB
    assert peers["scheme"] == "https" and peers["server_name"] == "frexport-metrics"
    assert peers["ca_file"].startswith(str(tmp_path)) and peers["ca_file"].endswith("/ca.crt")
    assert peers["username"] == "prometheus" and Path(peers["password_file"]).read_text() == "change-me"
    assert peers["poll_interval"] == 5.0 and cfg["evidence"]["dir"] == "/var/lib/frexport/evidence"
    assert cfg["web"]["config_file"]
    # an unauthenticated view (the opt-in): plain http, no credentials
    docs = docs_of(helm.template(*UNAUTH))
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    cfg = _check_config(container(spec["containers"], "jobview"), spec, docs, tmp_path / "u", tls_dir)
    assert cfg["peers"]["scheme"] == "http" and cfg["peers"]["username"] is None and cfg["web"]["config_file"] is None


def test_basic_auth_over_http_only_when_the_chart_says_so(helm, tmp_path, tls_dir):
    """Issue 28: the view's password to the sidecars only over TLS, unless knowingly allowed; the
    view then starts (its --check-config passes) with the opt-in in its environment."""
    docs = docs_of(helm.template("-f", str(JOBVIEW), "--set", "webConfig.tls.enabled=false",
                                 "--set", "jobView.allowBasicAuthOverHttp=true"))
    spec = one(docs, "Deployment")["spec"]["template"]["spec"]
    cfg = _check_config(container(spec["containers"], "jobview"), spec, docs, tmp_path, tls_dir)
    assert cfg["peers"]["scheme"] == "http" and cfg["peers"]["allow_basic_auth_over_http"] is True


def test_sidecar_with_the_peers_endpoint_passes_check_config(secure, helm, tmp_path, tls_dir):
    for name, docs in (("secure", secure), ("unauth", docs_of(helm.template(*UNAUTH)))):
        spec = pod_spec(docs)
        sidecar, _ = sidecar_of(spec)
        cfg = _check_config(sidecar, spec, docs, tmp_path / name, tls_dir)
        assert cfg["peers"]["serve"] is True
        assert cfg["peers"]["allow_unauthenticated"] is (name == "unauth")


def test_the_views_own_metrics_are_scraped_with_the_sidecars_auth_under_the_jobs_name(secure, helm):
    dep = one(secure, "Deployment", f"{JOB}-frexport-jobview")
    [mine] = [d for d in secure if d["kind"] == "PodMonitor" and d["metadata"]["name"] == f"{JOB}-frexport-jobview"]
    assert _selects(mine["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    [endpoint] = mine["spec"]["podMetricsEndpoints"]
    port = container(dep["spec"]["template"]["spec"]["containers"], "jobview")["ports"][0]["name"]
    assert endpoint["port"] == port and endpoint["path"] == "/metrics"
    [sidecars] = [d for d in secure if d["kind"] == "PodMonitor" and d is not mine]
    theirs = sidecars["spec"]["podMetricsEndpoints"][0]
    for key in ("scheme", "tlsConfig", "basicAuth"):
        assert endpoint.get(key) == theirs.get(key), key
    assert {"targetLabel": "job", "replacement": JOB, "action": "replace"} in endpoint["relabelings"]
    # the sidecars' monitor does not select the view (it would scrape it as a pod of the job)
    assert not _selects(sidecars["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    off = docs_of(helm.template("-f", str(JOBVIEW), "--set", "podMonitor.enabled=false"))
    assert not [d for d in off if d["kind"] == "PodMonitor"]
