"""The mutating admission webhook's decision: an AdmissionReview v1 in, one out.

A Pod annotated `frexport.io/inject: "true"` gets the same patch as `frexport inject` (pod.py), as
a JSONPatch; any other object or pod is allowed unchanged. A pod that cannot be patched is still
allowed, with a warning: a webhook must never be the reason a training job does not start (the
OpenTelemetry Operator's pod webhook does the same, with failurePolicy Ignore).
"""

from __future__ import annotations

import base64
import copy
import json

from frexport.inject.pod import InjectError, Settings
from frexport.inject.workloads import inject_object

INJECT_ANNOTATION = "frexport.io/inject"


def review(request_body: bytes, s: Settings) -> dict:
    """The AdmissionReview response to an AdmissionReview request (raises ValueError on bad input)."""
    doc = json.loads(request_body)
    if not isinstance(doc, dict) or doc.get("kind") != "AdmissionReview" or not isinstance(doc.get("request"), dict):
        raise ValueError("not an AdmissionReview request")
    req = doc["request"]
    if not isinstance(req.get("uid", ""), str) or not isinstance(req.get("kind") or {}, dict):
        raise ValueError("request.uid must be a string and request.kind an object")
    response: dict = {"uid": req.get("uid", ""), "allowed": True}
    pod = req.get("object")
    if (req.get("kind") or {}).get("kind") == "Pod" and isinstance(pod, dict) and wants_injection(pod):
        patched = copy.deepcopy(pod)
        patched.setdefault("kind", "Pod")
        try:
            if inject_object(patched, s):
                ops = json_patch(pod, patched)
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
        except InjectError as exc:
            response["warnings"] = [f"frexport: not injected: {exc}"]
        except (TypeError, AttributeError, KeyError, ValueError) as exc:  # a pod no API server sends
            response["warnings"] = [f"frexport: not injected: the pod's shape is not a Pod's "
                                    f"({type(exc).__name__}: {str(exc)[:200]})"]
    return {"apiVersion": doc.get("apiVersion", "admission.k8s.io/v1"), "kind": "AdmissionReview",
            "response": response}


def wants_injection(pod: dict) -> bool:
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    return str(notes.get(INJECT_ANNOTATION, "")).lower() == "true"


def json_patch(before: dict, after: dict) -> list[dict]:
    """add/replace operations on the fields of metadata and spec that changed (inject only adds)."""
    ops: list[dict] = []
    for part in ("metadata", "spec"):
        old, new = before.get(part), after.get(part) or {}
        if old is None:
            ops.append({"op": "add", "path": f"/{part}", "value": new})
            continue
        for key, value in new.items():
            if key not in old:
                ops.append({"op": "add", "path": f"/{part}/{_escape(key)}", "value": value})
            elif old[key] != value:
                ops.append({"op": "replace", "path": f"/{part}/{_escape(key)}", "value": value})
    return ops


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
