"""Validate custom resources against a CRD's real openAPIV3Schema, strictly (tests/fixtures/k8s/crds).

The API server prunes fields a structural schema does not declare; `kubectl apply --validate=strict`
(the default since 1.25) refuses them. So every object schema that declares properties, and neither
preserves unknown fields nor says what else it allows, is closed here (additionalProperties: false),
and metadata gets ObjectMeta's fields. CEL rules (x-kubernetes-validations) are not evaluated.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import jsonschema
import yaml

from tests.support import paths

CRDS = paths.FIXTURES / "k8s" / "crds"
_META = {"type": "object", "additionalProperties": False, "properties": {
    "name": {"type": "string"}, "namespace": {"type": "string"}, "generateName": {"type": "string"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}}


def load_crd(name: str) -> dict:
    """A CRD fixture by its file name stem, e.g. 'trainer.kubeflow.org_trainjobs'."""
    with gzip.open(CRDS / f"{name}.json.gz", "rt", encoding="utf-8") as f:
        return json.load(f)


def _close(schema: object) -> None:
    if isinstance(schema, list):
        for s in schema:
            _close(s)
        return
    if not isinstance(schema, dict):
        return
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        schema["additionalProperties"] = False
    for value in schema.values():
        _close(value)


def validator(crd: dict, version: str = "v1alpha1") -> jsonschema.protocols.Validator:
    spec = crd["spec"]
    served = next(v for v in spec["versions"] if v["name"] == version)
    schema = copy.deepcopy(served["schema"]["openAPIV3Schema"])
    _close(schema)
    schema["properties"]["metadata"] = _META
    schema["properties"]["apiVersion"] = {"const": f"{spec['group']}/{version}"}
    schema["properties"]["kind"] = {"const": spec["names"]["kind"]}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return jsonschema.Draft7Validator(schema)


def errors(obj: dict, crd: dict) -> list[str]:
    """Every way `obj` breaks `crd`'s schema, as 'path: message'; [] when it is valid."""
    return [f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in validator(crd).iter_errors(obj)]


def crd_for(kind: str) -> dict:
    return load_crd(f"trainer.kubeflow.org_{kind.lower()}s")


def fixture(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
