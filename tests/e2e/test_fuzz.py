"""A short coverage-guided fuzzing run in CI (the full campaign: 1M inputs, see docs/security.md)."""

import os
import shutil
import subprocess
import sys

import pytest

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


@pytest.mark.slow
@pytest.mark.parametrize("target,runs", [("tail", 20000), ("http", 400), ("metrics", 800)])
def test_live_paths_fuzz_finds_no_crash_and_promtool_accepts_every_kept_exposition(tmp_path, target, runs):
    """Issue 18: the JSON tail parser, the HTTP client against a fuzzing peer, the metrics of fuzzed
    snapshots (lone surrogates, huge names, values outside 64 bits). Brief; the campaign is longer."""
    out_dir = tmp_path / "expositions"
    out_dir.mkdir()
    out = subprocess.run([sys.executable, str(HERE / "fuzz" / "fuzz_live.py"), target, f"-runs={runs}", "-seed=1"],
                         capture_output=True, text=True, timeout=400, cwd=tmp_path,
                         env=dict(os.environ, FREXPORT_FUZZ_REPORT_EVERY=str(runs), FREXPORT_FUZZ_KEEP="100",
                                  FREXPORT_FUZZ_OUT=str(out_dir)))
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"fuzz_live {target}: {runs} inputs" in out.stderr and f"Done {runs} runs" in out.stderr
    if target == "metrics":
        kept = sorted(out_dir.iterdir())
        assert len(kept) >= 5
        for f in kept:
            check = subprocess.run([shutil.which("promtool"), "check", "metrics"], stdin=f.open("rb"),
                                   capture_output=True, text=True, timeout=60)
            assert "error while linting" not in check.stderr and "parse" not in check.stderr.lower(), \
                (f.name, check.stderr)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc and libasan (build-essential)")
def test_scanner_sanitized_fuzz_finds_no_crash(tmp_path):
    """A short run of the compiled scanner's AddressSanitizer campaigns (1M inputs each: docs/security.md)."""
    out = subprocess.run([sys.executable, str(paths.ROOT / "scripts" / "fuzz_scan.py"),
                          "--inputs", "20000", "--chunk", "10000", "--procs", "1", "--crash-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=paths.ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "done: 20000 inputs" in out.stdout and "crashes 0" in out.stdout
    assert "sanitizer runtime loaded" in out.stdout
