"""Issue 27's classes as a user meets them: a real torch gloo job under torchrun (tests/realjobs),
captured while it hangs, then `frexport analyze` on the capture, with its captured, fresh and
back-dated file times. Each run is a new job, so the rules are judged on dumps no test was written
against (the fixtures in tests/fixtures/real are one earlier run of the same scenarios)."""

import json
import subprocess
import sys

import pytest

from tests.support import paths
from tests.support.filetimes import copies

# scenario -> (verdict, kind, culprit ranks) of the first finding
EXPECTED = {
    "killed_in_allreduce": ("unhealthy", "missing_rank", [2]),
    "coalesced_extra_tensor": ("unhealthy", "size_mismatch", [1]),
}


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_a_fresh_run_of_the_job_gets_the_same_diagnosis(tmp_path, scenario):
    out = tmp_path / "capture"
    subprocess.run([sys.executable, str(paths.REALJOBS / "capture.py"), scenario, str(out)], check=True,
                   timeout=300, capture_output=True)
    docs = set()
    for _, d in copies(out, tmp_path / "copies"):
        run = subprocess.run([sys.executable, "-m", "frexport", "analyze", str(d), "--format", "json"],
                             capture_output=True, text=True, timeout=120)
        doc = json.loads(run.stdout)
        f = doc["findings"][0]
        assert (doc["verdict"], f["kind"], f["culprit_ranks"]) == EXPECTED[scenario], run.stdout
        docs.add(json.dumps(doc, sort_keys=True))
    assert len(docs) == 1  # the file times change nothing
