"""Evidence that outlives the pod, from the chart: a per-pod directory on a claim, and the upload
configured through the sidecar's environment exactly as frexport reads it."""

from __future__ import annotations

from frexport.cli.serve import make_uploader
from frexport.config import load_config, validate
from tests.support.helm_tools import CHART, docs_of, pod_spec, resolve_env, sidecar_of

FIELDS = {"metadata.name": "train-0-x", "metadata.namespace": "ml", "spec.nodeName": "n1",
          "metadata.labels['batch.kubernetes.io/job-name']": "train"}


def test_claim_and_upload_reach_frexports_config(helm, monkeypatch):
    docs = docs_of(helm.template("-f", str(CHART / "ci" / "evidence-values.yaml")))
    spec = pod_spec(docs)
    sidecar, _ = sidecar_of(spec)
    mount = next(m for m in sidecar["volumeMounts"] if m["name"] == "frexport-evidence")
    assert mount == {"name": "frexport-evidence", "mountPath": "/shared/frexport/evidence",
                     "subPathExpr": "$(POD_NAME)"}
    claim = next(v for v in spec["volumes"] if v["name"] == "frexport-evidence")
    assert claim["persistentVolumeClaim"] == {"claimName": "frexport-evidence"}
    trainer = next(c for c in spec["containers"] if c["name"] == "trainer")
    assert all(m["name"] != "frexport-evidence" for m in trainer.get("volumeMounts", []))
    assert sidecar["envFrom"] == [{"secretRef": {"name": "frexport-evidence-s3"}}]
    # The Secret's keys join the environment (envFrom); frexport reads the rest from FREXPORT_*.
    env = {**resolve_env(sidecar, FIELDS), "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    for name, value in env.items():  # the sidecar's process environment
        monkeypatch.setenv(name, value)
    args = sidecar["args"]
    cfg = load_config(env=env, overrides={"evidence.dir": args[args.index("--evidence-dir") + 1],
                                          "sources.dump_dirs": [{"path": "/shared/frexport/dumps"}]})
    assert validate(cfg) == []
    up = make_uploader(cfg)
    assert up is not None and up.target.endpoint == "http://minio.minio:9000"
    assert up.target.bucket == "training-evidence" and up.target.access_key_id == "k"
    assert up.key_prefix("/shared/frexport/evidence/B") == "frexport/prod/train/train-0-x/B"


def test_a_claim_is_required(helm):
    out = helm.run("template", "t", str(CHART), "--set", "example.enabled=true",
                   "--set", "evidence.persistence.enabled=true", check=False)
    assert out.returncode != 0 and "evidence.persistence.existingClaim" in out.stderr
    out = helm.run("lint", str(CHART), "--set", "evidence.upload.endpoint=minio:9000", check=False)
    assert out.returncode != 0 and "evidence.upload.endpoint" in out.stdout + out.stderr
