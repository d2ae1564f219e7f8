"""The alert rules pass promtool's checks and its unit tests (tests/prometheus/*.test.yaml)."""

import shutil
import subprocess

import pytest

from tests.support import paths

ROOT = paths.ROOT
RULES = paths.RULES


@pytest.fixture(scope="module")
def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (scripts/setup.sh does)")
    return path


def test_rules_are_valid(promtool):
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 20 rules found" in out.stdout


def test_rule_unit_tests(promtool):
    out = subprocess.run([promtool, "test", "rules", str(ROOT / "tests" / "prometheus" / "frexport-rules.test.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_severity_and_annotations():
    import yaml

    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    names = {r["alert"] for r in rules}
    assert names == {"FrexportRankStalled", "FrexportRankBehindPeers", "FrexportCollectiveNearTimeout",
                     "FrexportTimeoutDumpWritten", "FrexportDesyncDetected", "FrexportStraggler",
                     "FrexportSourceDown", "FrexportExporterAbsent", "FrexportNoRanksSeen",
                     "FrexportCollectiveHung", "FrexportCollectiveMismatch", "FrexportRankSkippedCollective"}
    tested = (ROOT / "tests" / "prometheus" / "frexport-rules.test.yaml").read_text()
    for r in rules:
        assert r["labels"]["severity"] in ("critical", "warning")
        assert {"summary", "description", "runbook_url"} <= set(r["annotations"])
        assert r["annotations"]["runbook_url"].endswith("#" + r["alert"].lower())
        assert f"alertname: {r['alert']}" in tested
