"""A short coverage-guided fuzzing run in CI (the full campaign: 1M inputs, see docs/security.md)."""

import os
import subprocess
import sys

from tests.support import paths

HERE = paths.TESTS


def test_atheris_campaign_finds_no_crash(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for f in (HERE / "fuzz" / "corpus").iterdir():
        (corpus / f.name).write_bytes(f.read_bytes())
    out = subprocess.run([sys.executable, str(HERE / "fuzz" / "fuzz_decode.py"), "-runs=20000", str(corpus)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=dict(os.environ, FREXPORT_FUZZ_REPORT_EVERY="20000"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fuzz_decode: 20000 inputs" in out.stderr and "no crash" in out.stderr
    assert "Done 20000 runs" in out.stderr
