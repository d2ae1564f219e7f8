"""Patch one pod template (its metadata and spec, plain dicts) so frexport watches its ranks.

What it adds, and why each part is shaped so it does not harm the pod it joins:
- a native sidecar (an init container with restartPolicy: Always, Kubernetes >= 1.29) running
  `frexport serve`: it starts before the trainer and never blocks a Job's completion. Its requests
  equal its limits, so a Guaranteed pod stays Guaranteed (the kubelet judges QoS over every
  container, init containers included). It listens on `[::]:PORT`, dual-stack;
- a preparation init container that copies the agent (stdlib only) into a volume the trainer
  mounts read-only;
- in each trainer container: PYTHONPATH (frexport's sitecustomize hook first) and
  FREXPORT_AGENT_DIR, and the two mounts. Image, command and args are left as they are;
- the pod's securityContext is kept, field by field: frexport only sets fsGroup (and its change
  policy) where the workload sets none. The sidecar joins whatever fsGroup the pod has, which
  owns the shared volume and so the rank sockets;
- the service-account token is hidden from frexport's containers only (an empty volume over its
  mount path: the ServiceAccount admission plugin skips a container that mounts that path), since
  the trainer may need it; frexport never talks to the API server;
- the label the monitors select (frexport.io/sidecar) and, where the workload's controller sets
  no job label of its own, frexport.io/job; FREXPORT_JOB_ID comes from the identity label through
  the downward API.
Applying it twice changes nothing: a pod that already has the sidecar is left alone.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from frexport import __version__

SIDECAR = "frexport"
PREPARE = "frexport-init"
SHARED_VOLUME = "frexport-shared"
AGENT_VOLUME = "frexport-agent"
NO_TOKEN_VOLUME = "frexport-no-token"
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SELECT_LABEL = "frexport.io/sidecar"
JOB_LABEL = "frexport.io/job"
INJECTED_ANNOTATION = "frexport.io/injected"
PORT_NAME = "frexport-metrics"
SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}}


@dataclass
class Settings:
    image: str = f"ghcr.io/frexport/frexport:{__version__}"
    image_pull_policy: str = "IfNotPresent"
    shared_dir: str = "/shared/frexport"
    agent_dir: str = "/opt/frexport-agent"
    port: int = 9464
    # requests == limits: see the module docstring
    cpu: str = "200m"
    memory: str = "256Mi"
    shared_size: str = "2Gi"
    drain_seconds: int = 15
    fs_group: int = 65532
    containers: list[str] = field(default_factory=list)  # trainer containers to activate; empty: all
    extra_args: list[str] = field(default_factory=list)
    # TLS/basic auth (the chart's webConfig): Secrets in the pod's namespace, mounted in the sidecar
    web_config_secret: str = ""  # key web-config.yml, read with --web-config-file
    web_tls_secret: str = ""  # kubernetes.io/tls Secret at /etc/frexport/tls; probes use HTTPS
    web_basic_auth: bool = False  # every path needs auth: probes use tcpSocket
    # The peers endpoint (/api/v1/ranks, `serve --peers-api`) for the job-level view: it serves every
    # rank's recorder, so, as the chart does, only behind the web config unless said otherwise
    peers_api: bool = False
    peers_api_unauthenticated: bool = False  # a network nothing else reaches: no web config needed


class InjectError(ValueError):
    """The pod template cannot be patched as asked (the message says why)."""


def check_settings(s: Settings) -> None:
    """Refuse what the chart refuses (raises InjectError): the peers endpoint open to anyone."""
    if s.peers_api and not s.web_config_secret and not s.peers_api_unauthenticated:
        raise InjectError("the peers endpoint (--peers-api) serves every rank's recorder: give --web-config-secret "
                          "(TLS, basic auth) or, on a network nothing else reaches, --peers-api-unauthenticated")


def inject_pod(meta: dict, spec: dict, s: Settings, identity: tuple[str, str | None]) -> bool:
    """Patch in place; returns False where the pod already has frexport. `identity` is (label key,
    value to set or None where the workload's controller sets that label on its pods)."""
    if _already(spec):
        return False
    check_settings(s)
    _refuse_collisions(spec, s)
    trainers = [c for c in spec.get("containers", []) if not s.containers or c.get("name") in s.containers]
    missing = set(s.containers) - {c.get("name") for c in trainers}
    if missing or not trainers:
        raise InjectError(f"no container named {', '.join(sorted(missing)) or 'at all'} in the pod template")
    key, value = identity
    labels = meta.setdefault("labels", {})
    labels[SELECT_LABEL] = "true"
    if value is not None:
        labels[key] = value
    meta.setdefault("annotations", {})[INJECTED_ANNOTATION] = __version__
    sc = spec.setdefault("securityContext", {})
    if "fsGroup" not in sc:
        sc["fsGroup"] = s.fs_group
        sc.setdefault("fsGroupChangePolicy", "OnRootMismatch")
    spec.setdefault("volumes", []).extend([
        {"name": SHARED_VOLUME, "emptyDir": {"sizeLimit": s.shared_size}},
        {"name": AGENT_VOLUME, "emptyDir": {"sizeLimit": "64Mi"}},
        {"name": NO_TOKEN_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ])
    spec["volumes"].extend({"name": n, "secret": {"secretName": secret}} for n, _, secret in _web_mounts(s))
    spec.setdefault("initContainers", []).extend([_prepare(s), _sidecar(s, key)])
    for c in trainers:
        _activate(c, s)
    return True


def _refuse_collisions(spec: dict, s: Settings) -> None:
    """A pod that already uses one of the names or paths the patch adds would become an invalid pod
    (two containers or volumes of one name, two mounts at one path): refused, saying which."""
    ours_c = {SIDECAR, PREPARE}
    ours_v = {SHARED_VOLUME, AGENT_VOLUME, NO_TOKEN_VOLUME} | {n for n, _, _ in _web_mounts(s)}
    ours_p = {s.shared_dir.rstrip("/"), s.agent_dir.rstrip("/")}
    found = [f"container {c.get('name')!r}" for c in spec.get("initContainers", []) + spec.get("containers", [])
             if c.get("name") in ours_c]
    found += [f"volume {v.get('name')!r}" for v in spec.get("volumes", []) if v.get("name") in ours_v]
    found += [f"container {c.get('name')!r} mounts {m.get('mountPath')!r}" for c in spec.get("containers", [])
              for m in c.get("volumeMounts", []) if str(m.get("mountPath", "")).rstrip("/") in ours_p]
    if found:
        raise InjectError(f"the pod already has {', '.join(found[:5])}: frexport adds containers "
                          f"{', '.join(sorted(ours_c))}, volumes {', '.join(sorted(ours_v))} and mounts at "
                          f"{', '.join(sorted(ours_p))}; rename yours or give frexport other paths")


def _already(spec: dict) -> bool:
    names = {c.get("name") for c in spec.get("initContainers", []) + spec.get("containers", [])}
    return SIDECAR in names or any(v.get("name") == SHARED_VOLUME for v in spec.get("volumes", []))


def _resources(s: Settings) -> dict:
    amount = {"cpu": s.cpu, "memory": s.memory}
    return {"requests": dict(amount), "limits": dict(amount)}


def _frexport_mounts(s: Settings) -> list[dict]:
    return [{"name": SHARED_VOLUME, "mountPath": s.shared_dir},
            {"name": NO_TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True}]


def _web_mounts(s: Settings) -> list[tuple[str, str, str]]:
    """(volume name, mount path, Secret name) of the web config and its TLS files."""
    out = []
    if s.web_config_secret:
        out.append(("frexport-web-config", "/etc/frexport/web", s.web_config_secret))
        if s.web_tls_secret:
            out.append(("frexport-web-tls", "/etc/frexport/tls", s.web_tls_secret))
    return out


def _probes(s: Settings) -> tuple[dict, dict]:
    """Liveness and readiness. Basic auth covers every path and the kubelet could only send a password
    written into the pod spec: tcpSocket then. TLS: HTTPS (the kubelet does not verify certificates)."""
    def check(path: str) -> dict:
        if s.web_config_secret and s.web_basic_auth:
            return {"tcpSocket": {"port": PORT_NAME}}
        get = {"path": path, "port": PORT_NAME}
        if s.web_config_secret and s.web_tls_secret:
            get["scheme"] = "HTTPS"
        return {"httpGet": get}
    return ({**check("/healthz"), "initialDelaySeconds": 5, "periodSeconds": 20, "timeoutSeconds": 5,
             "failureThreshold": 3},
            {**check("/readyz"), "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3})


def _prepare(s: Settings) -> dict:
    return {
        "name": PREPARE, "image": s.image, "imagePullPolicy": s.image_pull_policy,
        "command": ["python", "-m", "frexport.inject.prepare", "/frexport-agent", s.shared_dir],
        "resources": _resources(s), "securityContext": copy.deepcopy(SECURITY),
        "volumeMounts": _frexport_mounts(s) + [{"name": AGENT_VOLUME, "mountPath": "/frexport-agent"}],
    }


def _sidecar(s: Settings, job_label: str) -> dict:
    d = s.shared_dir
    field_env = [("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
                 ("NODE_NAME", "spec.nodeName"), ("FREXPORT_JOB_ID", f"metadata.labels['{job_label}']")]
    env = [{"name": n, "valueFrom": {"fieldRef": {"fieldPath": p}}} for n, p in field_env]
    env += [{"name": "OTEL_RESOURCE_ATTRIBUTES",
             "value": "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),k8s.node.name=$(NODE_NAME)"},
            {"name": "FREXPORT_EVIDENCE__PYSPY", "value": "false"}]
    c: dict[str, Any] = {
        "name": SIDECAR, "image": s.image, "imagePullPolicy": s.image_pull_policy, "restartPolicy": "Always",
        "command": ["frexport"],
        "args": ["serve", "--sockets-dir", d, "--dump-dir", f"{d}/dumps", "--evidence-dir", f"{d}/evidence",
                 "--listen", f"[::]:{s.port}", *s.extra_args],
        "env": env,
        "ports": [{"name": PORT_NAME, "containerPort": s.port, "protocol": "TCP"}],
        "livenessProbe": _probes(s)[0], "readinessProbe": _probes(s)[1],
        "resources": _resources(s), "securityContext": copy.deepcopy(SECURITY),
        "volumeMounts": _frexport_mounts(s) + [{"name": n, "mountPath": m, "readOnly": True}
                                               for n, m, _ in _web_mounts(s)],
    }
    if s.web_config_secret:
        c["args"] += ["--web-config-file", "/etc/frexport/web/web-config.yml"]
    if s.peers_api:  # behind the same listener and web config as /metrics (docs/multi-node.md)
        c["args"] += ["--peers-api"] + ([] if s.web_config_secret else ["--peers-api-unauthenticated"])
    if s.drain_seconds > 0:  # keep serving a little after the trainer ended: the last scrape sees the end
        c["lifecycle"] = {"preStop": {"exec": {"command": ["sleep", str(s.drain_seconds)]}}}
    return c


def _activate(c: dict, s: Settings) -> None:
    """The agent loads in every Python process of the container through PYTHONPATH (frexport's
    sitecustomize first) and acts only in rank processes; the container's own PYTHONPATH follows."""
    ours = f"{s.agent_dir}/frexport/agent/_bootstrap:{s.agent_dir}"
    env = c.setdefault("env", [])
    existing = next((e for e in env if e.get("name") == "PYTHONPATH"), None)
    if existing is None and c.get("envFrom"):
        # a PYTHONPATH from a ConfigMap or Secret (envFrom) would be overridden by ours, silently: env wins
        # over envFrom. $(PYTHONPATH) is expanded by the kubelet from envFrom; left as is when there is
        # none, it is a directory that does not exist, which Python skips.
        env.append({"name": "PYTHONPATH", "value": ours + ":$(PYTHONPATH)"})
    elif existing is None:
        env.append({"name": "PYTHONPATH", "value": ours})
    elif "value" in existing:
        existing["value"] = ours + (":" + existing["value"] if existing["value"] else "")
    else:
        raise InjectError(f"container {c.get('name')}: PYTHONPATH comes from valueFrom; "
                          "prepend the agent yourself or run the trainer under frexport-launch")
    if not any(e.get("name") == "FREXPORT_AGENT_DIR" for e in env):
        env.append({"name": "FREXPORT_AGENT_DIR", "value": s.shared_dir})
    c.setdefault("volumeMounts", []).extend([
        {"name": SHARED_VOLUME, "mountPath": s.shared_dir},
        {"name": AGENT_VOLUME, "mountPath": s.agent_dir, "readOnly": True},
    ])
