"""The PrometheusRule: the one rules file, promtool on what the chart renders.

Tools: ./scripts/install-tools.sh (scripts/setup.sh runs it). A missing tool fails, never skips."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.support.helm_tools import (
    RULES,
    RULES_TEST,
    one,
)


def test_prometheusrule_is_the_config_rules_file(rendered):
    spec = one(rendered["minimal"][1], "PrometheusRule")["spec"]
    assert spec == yaml.safe_load(RULES.read_text())
    # Helm left the alert templates alone.
    text = rendered["minimal"][0].read_text()
    assert "{{ $labels.rank }}" in text and "{{ $value | humanizeDuration }}" in text


def _promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's 'prometheus' package (scripts/setup.sh does)")
    return path


def test_rendered_rules_pass_promtool_check_and_the_same_unit_tests(rendered, tmp_path):
    promtool = _promtool()
    spec = one(rendered["minimal"][1], "PrometheusRule")["spec"]
    # The same layout as the repository, so tests/prometheus/frexport-rules.test.yaml applies unchanged
    # (its rule_files entry is ../../config/prometheus/frexport-rules.yaml).
    rules = tmp_path / "config" / "prometheus" / "frexport-rules.yaml"
    rules.parent.mkdir(parents=True)
    rules.write_text(yaml.safe_dump(spec, sort_keys=False))
    test_file = tmp_path / "tests" / "prometheus" / RULES_TEST.name
    test_file.parent.mkdir(parents=True)
    shutil.copy(RULES_TEST, test_file)
    out = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True)
    assert out.returncode == 0 and "SUCCESS: 20 rules found" in out.stdout, out.stdout + out.stderr
    out = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_rule_overrides_runbook_base_and_extra_labels(rendered, tmp_path):
    spec = one(rendered["example"][1], "PrometheusRule")["spec"]
    rules = [r for g in spec["groups"] for r in g["rules"] if "alert" in r]
    assert len(rules) == 12
    records = [r for g in spec["groups"] for r in g["rules"] if "record" in r]
    assert len(records) == 8 and not any("labels" in r for r in records)  # recorded series keep their labels
    for r in rules:
        assert r["annotations"]["runbook_url"] == "https://wiki.example.com/frexport/runbooks#" + r["alert"].lower()
        assert r["labels"]["team"] == "ml-infra" and r["labels"]["severity"] in ("critical", "warning")
        assert "{{ $labels." in r["annotations"]["summary"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
