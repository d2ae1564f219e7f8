"""What a bundle says of the ranks' recorders and of torch 2.15's c10d health check. Real files."""

import dataclasses
import json
from pathlib import Path

from frexport.decode.read import decode_bytes
from frexport.evidence.bundle import Bundle
from frexport.export.evidence import EvidenceWriter
from tests.support.synth import dump, entry


def test_a_backend_the_health_check_calls_aborted_is_said_in_the_bundle(tmp_path):
    data = json.dumps(dump([entry(1, 1)], world=2)).encode()
    dumps = {r: dataclasses.replace(decode_bytes(data, f"trace_{r}", rank=r), recorders=("gloo", "nccl2"),
                                    unhealthy_backends=("nccl2",) if r == 1 else ())
             for r in range(2)}
    path = Path(EvidenceWriter(str(tmp_path)).write(Bundle("timeout", "report\n", {}, dumps, {}, {})))
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["c10d_unhealthy_backends"] == {"nccl2": [1]}
    assert manifest["recorders"] == {"0": ["gloo", "nccl2"], "1": ["gloo", "nccl2"]}
    assert (path / "report.txt").read_text().startswith("c10d health check: backend nccl2 aborted on ranks 1\n")
