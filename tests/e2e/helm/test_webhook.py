"""The mutating admission webhook: the chart's Deployment, Service, certificate and
MutatingWebhookConfiguration, and `frexport webhook` answering real AdmissionReview JSON over real
HTTPS with the certificate the chart generated, verified the way the API server does (caBundle, the
Service's DNS name). The patched pod validates strictly.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
import uuid

import pytest
import yaml

from tests.support.helm_tools import CHART, docs_of, find, kubernetes_validate, one
from tests.support.ports import free_port

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"generateName": "train-0-", "namespace": "ml",
                    "labels": {"batch.kubernetes.io/job-name": "train"},
                    "annotations": {"frexport.io/inject": "true"}},
       "spec": {"restartPolicy": "Never", "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
                "containers": [{"name": "trainer", "image": "my-trainer:1", "command": ["torchrun", "train.py"],
                                "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                                              "limits": {"cpu": "8", "memory": "64Gi"}}}]}}


def admission_review(pod: dict) -> dict:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": "ml", "operation": "CREATE",
                        "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
                        "object": pod, "oldObject": None, "dryRun": False,
                        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}


def apply_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 add/replace on object members (what the webhook emits), as the API server applies it."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("add", "replace"), op
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parents:
            target = target[p]
        assert (last in target) == (op["op"] == "replace"), op["path"]
        target[last] = op["value"]
    return out


@pytest.fixture(scope="module")
def rendered_webhook(helm):
    return docs_of(helm.template("-f", str(CHART / "ci" / "webhook-values.yaml")))


@pytest.fixture(scope="module")
def server(rendered_webhook, tmp_path_factory):
    """`frexport webhook` as the chart's Deployment runs it, with the chart's generated certificate."""
    d = tmp_path_factory.mktemp("webhook")
    secret = one(rendered_webhook, "Secret")
    for key in ("tls.crt", "tls.key"):
        (d / key).write_bytes(base64.b64decode(secret["data"][key]))
    mwc = one(rendered_webhook, "MutatingWebhookConfiguration")
    (d / "ca.crt").write_bytes(base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]))
    c = one(rendered_webhook, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    port = free_port()
    args = [a.replace("/etc/frexport/webhook", str(d)) for a in c["args"]]
    args[args.index("--listen") + 1] = f"127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "frexport", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    svc = mwc["webhooks"][0]["clientConfig"]["service"]
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    host = f"{svc['name']}.{svc['namespace']}.svc"  # the name the API server checks
    deadline = time.monotonic() + 30
    while True:
        try:
            ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 5), server_hostname=host).close()
            break
        except (OSError, ssl.SSLError):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.2)
    yield port, ctx, host, svc["path"]
    proc.terminate()
    proc.wait(10)


def post(server, body: bytes) -> tuple[int, bytes]:
    port, ctx, host, path = server
    conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
    # connect to 127.0.0.1 but verify the certificate against the Service's DNS name
    conn.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 10), server_hostname=host)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    out = r.status, r.read()
    conn.close()
    return out


def test_an_annotated_pod_is_patched_and_validates(server, rendered_webhook, tmp_path):
    req = admission_review(POD)
    status, body = post(server, json.dumps(req).encode())
    assert status == 200
    review = json.loads(body)
    resp = review["response"]
    assert review["kind"] == "AdmissionReview" and review["apiVersion"] == "admission.k8s.io/v1"
    assert resp["uid"] == req["request"]["uid"] and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    pod = apply_patch(POD, json.loads(base64.b64decode(resp["patch"])))
    spec = pod["spec"]
    sidecar = next(c for c in spec["initContainers"] if c["name"] == "frexport")
    deployment = one(rendered_webhook, "Deployment")
    assert sidecar["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert sidecar["resources"]["limits"] == {"cpu": "200m", "memory": "256Mi"} == sidecar["resources"]["requests"]
    trainer = spec["containers"][0]
    assert trainer["command"] == ["torchrun", "train.py"] and trainer["image"] == "my-trainer:1"
    assert spec["securityContext"] == {"runAsUser": 1000, "fsGroup": 2000}  # the workload's own, kept
    assert pod["metadata"]["labels"]["frexport.io/sidecar"] == "true"
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump({**pod, "metadata": {**pod["metadata"], "name": "train-0-abcde"}}))
    out = kubernetes_validate([path], "1.29.0")
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_pod_without_the_annotation_is_left_alone(server):
    plain = copy.deepcopy(POD)
    del plain["metadata"]["annotations"]
    for pod in (plain, {**POD, "metadata": {**POD["metadata"], "annotations": {"frexport.io/inject": "false"}}}):
        status, body = post(server, json.dumps(admission_review(pod)).encode())
        resp = json.loads(body)["response"]
        assert status == 200 and resp["allowed"] is True and "patch" not in resp


def test_not_an_admission_review_is_a_400(server):
    assert post(server, b'{"kind": "Pod"}')[0] == 400
    assert post(server, b"not json")[0] == 400


def test_the_rendered_webhook_objects(rendered_webhook, helm):
    mwc = one(rendered_webhook, "MutatingWebhookConfiguration")
    hook = mwc["webhooks"][0]
    svc = one(rendered_webhook, "Service", hook["clientConfig"]["service"]["name"])
    dep = one(rendered_webhook, "Deployment")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    pod_spec = dep["spec"]["template"]["spec"]
    assert pod_spec["automountServiceAccountToken"] is False
    assert pod_spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # cert-manager: a Certificate for the Service's names, the CA injected by cainjector
    cm = docs_of(helm.template("-f", str(CHART / "ci" / "webhook-values.yaml"),
                               "--set", "webhook.certManager.enabled=true"))
    cert = one(cm, "Certificate")
    assert f"{svc['metadata']['name']}.ml.svc" in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": one(cm, "Issuer")["metadata"]["name"]}
    cm_hook = one(cm, "MutatingWebhookConfiguration")
    assert cm_hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"ml/{cert['metadata']['name']}"
    assert "caBundle" not in cm_hook["webhooks"][0]["clientConfig"] and not find(cm, "Secret")
    vol = next(v for v in one(cm, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    assert vol["secret"]["secretName"] == cert["spec"]["secretName"]
    assert not find(docs_of(helm.template("-f", str(CHART / "ci" / "webhook-values.yaml"), "--set",
                                          "scope=workload")), "MutatingWebhookConfiguration")
    issuer = docs_of(helm.template("-f", str(CHART / "ci" / "webhook-values.yaml"), "--set",
                                   "webhook.certManager.enabled=true", "--set",
                                   "webhook.certManager.issuerRef.kind=ClusterIssuer", "--set",
                                   "webhook.certManager.issuerRef.name=corp-ca"))
    assert not find(issuer, "Issuer") and one(issuer, "Certificate")["spec"]["issuerRef"]["name"] == "corp-ca"


# --- issue 28, deliverable 4: the metrics server's limits, clear answers, no invalid pods


def raw_post(server, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """A request as written, over the webhook's TLS: for heads no HTTP client library sends."""
    port, ctx, host, path = server
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 10), server_hostname=host) as s:
        s.sendall(head.replace(b"PATH", path.encode()) + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    status = int(out.split(b" ", 2)[1])
    return status, out.partition(b"\r\n\r\n")[2]


def test_300_idle_connections_do_not_starve_reviews(server):
    port = server[0]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]  # no handshake, no request
    try:
        start = time.monotonic()
        status, body = post(server, json.dumps(admission_review(POD)).encode())
        assert status == 200 and "patch" in json.loads(body)["response"]
        assert time.monotonic() - start < 5
    finally:
        for s in idle:
            s.close()


@pytest.mark.parametrize("body, why", [
    (b"", "body of 1 to"),
    (b"[" * 100_000, "not an AdmissionReview"),
    (b'{"kind": "AdmissionReview", "request": {"uid": 5, "kind": "Pod"}}', "request.uid must be a string"),
    (b'{"kind": "AdmissionReview", "request": []}', "not an AdmissionReview"),
    (b"\xff\xfe not utf-8", "not an AdmissionReview"),
])
def test_a_malformed_review_is_a_400_that_says_why(server, body, why):
    status, answer = post(server, body) if body else raw_post(
        server, b"POST PATH HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status == 400 and why in answer.decode(), answer
    assert post(server, json.dumps(admission_review(POD)).encode())[0] == 200  # and it goes on serving


def test_a_bad_content_length_is_a_400(server):
    status, answer = raw_post(server, b"POST PATH HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n")
    assert status == 400 and b"Content-Length '1e3'" in answer


def _with(**spec) -> dict:
    pod = copy.deepcopy(POD)
    pod["spec"].update(spec)
    return pod


@pytest.mark.parametrize("pod, named", [
    (_with(initContainers=[{"name": "frexport-init", "image": "mine"}]), "container 'frexport-init'"),
    (_with(volumes=[{"name": "frexport-agent", "emptyDir": {}}]), "volume 'frexport-agent'"),
    (_with(containers=[{**POD["spec"]["containers"][0], "volumeMounts": [{"name": "d", "mountPath":
                                                                         "/shared/frexport"}]}],
           volumes=[{"name": "d", "emptyDir": {}}]), "mounts '/shared/frexport'"),
])
def test_a_pod_whose_names_or_paths_collide_is_not_patched_and_told_why(server, pod, named):
    status, body = post(server, json.dumps(admission_review(pod)).encode())
    resp = json.loads(body)["response"]
    assert status == 200 and resp["allowed"] is True and "patch" not in resp  # never an invalid pod
    (warning,) = resp["warnings"]
    assert named in warning and "frexport adds" in warning


def test_a_pythonpath_from_envfrom_is_kept_after_the_agent(server):
    trainer = {**POD["spec"]["containers"][0], "envFrom": [{"configMapRef": {"name": "trainer-env"}}]}
    status, body = post(server, json.dumps(admission_review(_with(containers=[trainer]))).encode())
    pod = apply_patch(_with(containers=[trainer]), json.loads(base64.b64decode(json.loads(body)["response"]["patch"])))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PYTHONPATH"].startswith("/opt/frexport-agent/") and env["PYTHONPATH"].endswith(":$(PYTHONPATH)")
