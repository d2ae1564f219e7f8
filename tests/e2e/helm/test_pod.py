"""The sidecar in the rendered pod: containers, volumes, environment, security.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.helm_tools import (
    ROOT,
    SECURITY,
    SIDECAR_ARGS,
    container,
    env_map,
    one,
    pod_spec,
    resolve_env,
    sidecar_of,
)


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
    # requests == limits in every frexport container: a Guaranteed pod stays Guaranteed
    for c in spec["initContainers"]:
        assert c["resources"] == {"requests": {"cpu": "200m", "memory": "256Mi"},
                                  "limits": {"cpu": "200m", "memory": "256Mi"}}, c["name"]
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
    assert (env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]) == ("parentbased_traceidratio", "0.05")
    assert env["FREXPORT_TRACES__CHECKPOINT_FILE"] == "/shared/frexport/otlp-checkpoint.json"
    for variant in ("example", "minimal"):
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in rendered[variant][0].read_text()
        assert "OTEL_TRACES_SAMPLER" not in rendered[variant][0].read_text()


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
    env.update(resolve_env(sidecar, {"metadata.name": "p-0", "metadata.namespace": "ml", "spec.nodeName": "n1",
                                      "metadata.labels['batch.kubernetes.io/job-name']": "t-frexport-example"}))
    frexport = ROOT / ".venv" / "bin" / "frexport"
    out = subprocess.run([str(frexport), *sidecar["args"], "--check-config"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
