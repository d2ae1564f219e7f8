"""The webhook's AdmissionReview decision, without the server."""

import base64
import json

from frexport.inject.admission import json_patch, review
from frexport.inject.pod import Settings


def _review(pod: dict) -> dict:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "object": pod}}
    return review(json.dumps(body).encode(), Settings())["response"]


def test_a_pod_that_cannot_be_patched_is_still_admitted_with_a_warning():
    pod = {"metadata": {"name": "p", "annotations": {"frexport.io/inject": "true", "frexport.io/job": "bad value"}},
           "spec": {"containers": [{"name": "t"}]}}
    resp = _review(pod)
    assert resp["allowed"] is True and "patch" not in resp and "not a valid label value" in resp["warnings"][0]


def test_label_keys_with_slashes_are_escaped_and_an_injected_pod_is_left_alone():
    ops = json_patch({"metadata": {}}, {"metadata": {"labels": {"a/b": "1"}}, "spec": {}})
    assert ops == [{"op": "add", "path": "/metadata/labels", "value": {"a/b": "1"}}, {"op": "add", "path": "/spec",
                                                                                       "value": {}}]
    assert json_patch({"metadata": {"a/b~": 1}}, {"metadata": {"a/b~": 2}})[0]["path"] == "/metadata/a~1b~0"
    pod = {"metadata": {"name": "p", "annotations": {"frexport.io/inject": "true"}},
           "spec": {"containers": [{"name": "t"}]}}
    first = _review(pod)
    assert first["patchType"] == "JSONPatch" and json.loads(base64.b64decode(first["patch"]))
    pod["spec"]["initContainers"] = [{"name": "frexport"}]  # already has the sidecar (e.g. inject + webhook)
    assert "patch" not in _review(pod)


def test_the_webhook_turns_the_peers_endpoint_on_and_refuses_it_open():
    pod = {"metadata": {"name": "p", "annotations": {"frexport.io/inject": "true"}},
           "spec": {"containers": [{"name": "t"}]}}
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u1", "kind": {"kind": "Pod"}, "object": pod}}).encode()
    resp = review(body, Settings(peers_api=True, web_config_secret="frexport-web-config"))["response"]
    ops = json.loads(base64.b64decode(resp["patch"]))
    inits = next(op["value"] for op in ops if op["path"] == "/spec/initContainers")
    assert "--peers-api" in next(c for c in inits if c["name"] == "frexport")["args"]
    open_resp = review(body, Settings(peers_api=True))["response"]
    assert "patch" not in open_resp and "--peers-api-unauthenticated" in open_resp["warnings"][0]
