"""frexport inject: the pod template patch, per workload kind, and what it must not change."""

import copy
import io
import sys

import pytest
import yaml

from frexport.cli.main import main
from frexport.inject.pod import InjectError, Settings, inject_pod
from frexport.inject.workloads import inject_object, templates
from tests.support import paths

WORKLOADS = paths.FIXTURES / "k8s" / "workloads.yaml"


def _docs():
    return [d for d in yaml.safe_load_all(WORKLOADS.read_text()) if d]


def _by_kind(docs):
    return {d["kind"]: d for d in docs}


def _injected():
    docs = _docs()
    for d in docs:
        inject_object(d, Settings())
    return _by_kind(docs)


def _qos(spec):
    """Kubernetes' QoS class from the pod's containers, init containers included (GetPodQOS)."""
    requests, limits, guaranteed = {}, {}, True
    for c in spec.get("initContainers", []) + spec["containers"]:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req:
                requests[r] = 1
            if r in lim:
                limits[r] = 1
            if r not in lim or req.get(r, lim.get(r)) != lim.get(r):
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def test_every_kind_is_patched_and_other_objects_pass_through():
    docs = _docs()
    counts = {d["kind"]: inject_object(d, Settings()) for d in docs}
    assert counts == {"Pod": 1, "Job": 1, "CronJob": 1, "Deployment": 1, "StatefulSet": 1, "JobSet": 1,
                      "PyTorchJob": 2, "Service": 0}
    assert _by_kind(docs)["Service"] == _by_kind(_docs())["Service"]


@pytest.mark.parametrize("kind, key, value", [
    ("Job", "batch.kubernetes.io/job-name", None),
    ("CronJob", "batch.kubernetes.io/job-name", None),
    ("JobSet", "jobset.sigs.k8s.io/jobset-name", None),
    ("PyTorchJob", "training.kubeflow.org/job-name", None),
    ("Deployment", "frexport.io/job", "rl-actor"),
    ("StatefulSet", "frexport.io/job", "elastic-run-7"),  # the annotation overrides the name
    ("Pod", "frexport.io/job", "trainer-0"),
])
def test_job_identity_per_kind(kind, key, value):
    obj = _injected()[kind]
    for meta, spec, _ in templates(obj):
        sidecar = next(c for c in spec["initContainers"] if c["name"] == "frexport")
        job_id = next(e for e in sidecar["env"] if e["name"] == "FREXPORT_JOB_ID")
        assert job_id["valueFrom"]["fieldRef"]["fieldPath"] == f"metadata.labels['{key}']"
        assert meta["labels"].get(key) == value  # set only where no controller sets it
        assert meta["labels"]["frexport.io/sidecar"] == "true"


def test_pod_annotation_overrides_the_owner_label():
    job = _by_kind(_docs())["Job"]
    job["spec"]["template"]["metadata"] = {"annotations": {"frexport.io/job": "run-42"}}
    inject_object(job, Settings())
    assert job["spec"]["template"]["metadata"]["labels"]["frexport.io/job"] == "run-42"


def test_the_trainer_command_image_and_resources_stay():
    before, after = _by_kind(_docs()), _injected()
    for kind in before:
        if kind == "Service":
            continue
        for (_, b, _), (_, a, _) in zip(templates(before[kind]), templates(after[kind])):
            for cb, ca in zip(b["containers"], a["containers"]):
                for k in ("image", "command", "args", "resources", "name"):
                    assert cb.get(k) == ca.get(k), (kind, k)
            assert [c["name"] for c in a["containers"]] == [c["name"] for c in b["containers"]]


def test_agent_activation_by_environment_keeps_the_trainers_pythonpath():
    spec = _injected()["Job"]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["PYTHONPATH"] == "/opt/frexport-agent/frexport/agent/_bootstrap:/opt/frexport-agent:/workspace/src"
    assert env["FREXPORT_AGENT_DIR"] == "/shared/frexport"
    assert {"name": "frexport-agent", "mountPath": "/opt/frexport-agent", "readOnly": True} in \
        spec["containers"][0]["volumeMounts"]


def test_a_guaranteed_pod_stays_guaranteed():
    before = _by_kind(_docs())["Job"]["spec"]["template"]["spec"]
    after = _injected()["Job"]["spec"]["template"]["spec"]
    assert _qos(before) == "Guaranteed" and _qos(after) == "Guaranteed"
    for c in after["initContainers"]:
        assert c["resources"]["requests"] == c["resources"]["limits"] == {"cpu": "200m", "memory": "256Mi"}


def test_the_workloads_security_context_is_kept():
    sc = _injected()["Job"]["spec"]["template"]["spec"]["securityContext"]
    assert sc == {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]}  # fsGroup 2000 kept
    sc = _injected()["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert sc == {"fsGroup": 65532, "fsGroupChangePolicy": "OnRootMismatch"}  # none set: frexport's


def test_the_token_is_hidden_from_frexport_only():
    spec = _injected()["Job"]["spec"]["template"]["spec"]
    token = {"name": "frexport-no-token", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
             "readOnly": True}
    assert all(token in c["volumeMounts"] for c in spec["initContainers"])
    assert token not in spec["containers"][0]["volumeMounts"] and "automountServiceAccountToken" not in spec


def test_native_sidecar_listens_dual_stack():
    spec = _injected()["Pod"]["spec"]
    side = next(c for c in spec["initContainers"] if c["name"] == "frexport")
    assert side["restartPolicy"] == "Always" and side["args"][-2:] == ["--listen", "[::]:9464"]
    assert [c["name"] for c in spec["initContainers"]] == ["frexport-init", "frexport"]


def test_injecting_twice_changes_nothing():
    once = _injected()
    twice = copy.deepcopy(once)
    assert sum(inject_object(d, Settings()) for d in twice.values()) == 0
    assert twice == once


def test_only_the_named_containers_get_the_agent():
    dep = _by_kind(_docs())["Deployment"]
    inject_object(dep, Settings(containers=["actor"]))
    actor, shipper = dep["spec"]["template"]["spec"]["containers"]
    assert any(e["name"] == "PYTHONPATH" for e in actor["env"]) and "env" not in shipper
    with pytest.raises(InjectError, match="no container named nope"):
        inject_pod({}, {"containers": [{"name": "a"}]}, Settings(containers=["nope"]), ("frexport.io/job", "x"))


def test_a_bad_job_annotation_is_refused():
    dep = _by_kind(_docs())["Deployment"]
    dep["metadata"]["annotations"] = {"frexport.io/job": "not a label value"}
    with pytest.raises(InjectError, match="not a valid label value"):
        inject_object(dep, Settings())


def test_cli_reads_stdin_and_writes_every_document(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(WORKLOADS.read_text()))
    assert main(["inject", "-", "--cpu", "300m", "--memory", "128Mi"]) == 0
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == [d["kind"] for d in _docs()] and "8 pod template(s) patched" in err
    side = next(c for c in docs[0]["spec"]["initContainers"] if c["name"] == "frexport")
    assert side["resources"]["limits"] == {"cpu": "300m", "memory": "128Mi"}


def test_cli_names_what_it_cannot_patch(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("kind: Job\nmetadata: {name: j}\nspec: {}\n"))
    assert main(["inject"]) == 2
    assert "Job j: a pod template is missing" in capsys.readouterr().err


@pytest.mark.parametrize("text", [
    "kind: Job\nmetadata: {name: t}\nspec: {template: {spec: {containers: not-a-list}}}\n",
    "kind: Job\nmetadata: [1]\nspec: {template: {spec: {containers: [{name: a}]}}}\n",
    "kind: Job\nmetadata: {name: t}\nspec: {template: {spec: {containers: [a, b]}}}\n",
    "kind: 5\n",
    "kind: Job\nmetadata: {name: t}\nspec: {template: {metadata: 3, spec: {containers: [{name: a, env: 5}]}}}\n",
])
def test_cli_malformed_shapes_are_a_clear_error_not_a_traceback(monkeypatch, capsys, text):
    """Issue 28 (low): fields of the wrong shape gave tracebacks."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["inject"]) == 2
    err = capsys.readouterr().err
    assert "document 1" in err and "does not have the shape" in err and "Traceback" not in err


def test_a_pod_whose_names_collide_with_frexports_is_refused_saying_which():
    """Issue 28 (low): the patch made an invalid pod (two containers 'frexport-init')."""
    job = {"kind": "Job", "metadata": {"name": "t"}, "spec": {"template": {"spec": {
        "initContainers": [{"name": "frexport-init", "image": "mine"}], "containers": [{"name": "trainer"}]}}}}
    with pytest.raises(InjectError, match="the pod already has container 'frexport-init'"):
        inject_object(job, Settings())


def test_web_config_secrets_are_mounted_and_the_probes_follow(monkeypatch, capsys):
    """The chart's webConfig (TLS + basic auth) from inject: the sidecar reads the same Secrets."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(WORKLOADS.read_text()))
    assert main(["inject", "-", "--web-config-secret", "frexport-web-config", "--web-tls-secret",
                 "frexport-metrics-tls", "--web-basic-auth"]) == 0
    spec = yaml.safe_load_all(capsys.readouterr()[0]).__next__()["spec"]
    side = next(c for c in spec["initContainers"] if c["name"] == "frexport")
    assert side["args"][-2:] == ["--web-config-file", "/etc/frexport/web/web-config.yml"]
    mounts = {m["mountPath"]: m["name"] for m in side["volumeMounts"]}
    volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in spec["volumes"]}
    assert volumes[mounts["/etc/frexport/web"]] == "frexport-web-config"
    assert volumes[mounts["/etc/frexport/tls"]] == "frexport-metrics-tls"
    assert side["livenessProbe"]["tcpSocket"] == side["readinessProbe"]["tcpSocket"] == {"port": "frexport-metrics"}
    tls_only = Settings(web_config_secret="w", web_tls_secret="t")
    pod = {"containers": [{"name": "trainer"}]}
    inject_pod({}, pod, tls_only, ("frexport.io/job", "x"))
    side = next(c for c in pod["initContainers"] if c["name"] == "frexport")
    assert side["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    trainer_mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert "/etc/frexport/web" not in trainer_mounts  # the trainer never sees the credentials


def test_the_peers_endpoint_is_turned_on_behind_the_web_config_as_the_chart_does(monkeypatch, capsys):
    """--peers-api gives the job-level view its source; never open without a web config unless asked."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(WORKLOADS.read_text()))
    assert main(["inject", "-", "--peers-api"]) == 2
    assert "--web-config-secret" in capsys.readouterr().err  # refused: the recorders would be open to anyone

    monkeypatch.setattr(sys, "stdin", io.StringIO(WORKLOADS.read_text()))
    assert main(["inject", "-", "--peers-api", "--web-config-secret", "frexport-web-config"]) == 0
    side = next(c for c in next(yaml.safe_load_all(capsys.readouterr()[0]))["spec"]["initContainers"]
                if c["name"] == "frexport")
    assert "--peers-api" in side["args"] and "--peers-api-unauthenticated" not in side["args"]
    assert side["args"][side["args"].index("--web-config-file") + 1] == "/etc/frexport/web/web-config.yml"

    pod = {"containers": [{"name": "trainer"}]}
    inject_pod({}, pod, Settings(peers_api=True, peers_api_unauthenticated=True), ("frexport.io/job", "x"))
    args = next(c for c in pod["initContainers"] if c["name"] == "frexport")["args"]
    # the injected command is one `frexport serve` accepts, with the endpoint on
    assert main([*args, "--check-config"]) == 0
    effective = yaml.safe_load(capsys.readouterr()[0])
    assert effective["peers"]["serve"] is True and effective["peers"]["allow_unauthenticated"] is True

    plain = {"containers": [{"name": "trainer"}]}
    inject_pod({}, plain, Settings(), ("frexport.io/job", "x"))
    assert not any("peers" in a for a in next(c for c in plain["initContainers"] if c["name"] == "frexport")["args"])
