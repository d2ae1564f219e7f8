"""The version lives in one place, frexport/__init__.py: the package metadata, `frexport --version`,
the frexport_build_info metric, the changelog and the chart's default image tag all follow it."""

import re

import pytest
import tomllib
import yaml

import frexport
from frexport.cli.main import main
from frexport.cli.serve import build_sidecar
from frexport.config import Config, DumpDir
from frexport.decode import scanned
from tests.support.paths import ROOT

VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "frexport" / "__init__.py").read_text(), re.M)[1]


def test_version_is_semver_and_written_nowhere_else():
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", VERSION)
    assert frexport.__version__ == VERSION
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "frexport.__version__"}


def test_cli_version_shows_it_and_whether_the_compiled_scanner_is_in_use(capsys, monkeypatch):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    expect = "yes" if scanned.available() else "no - "
    assert e.value.code == 0 and capsys.readouterr().out.startswith(f"frexport {VERSION} (compiled scanner: {expect}")
    monkeypatch.setattr(scanned, "_scan", None)
    monkeypatch.setattr(scanned, "_why_not", "not built (No module named 'frexport.decode._scan')")
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == (
        f"frexport {VERSION} (compiled scanner: no - not built (No module named 'frexport.decode._scan'))\n")


def test_build_info_metric_shows_it(tmp_path):
    cfg = Config()
    cfg.sources.dump_dirs = [DumpDir(path=str(tmp_path))]
    _sidecar, registry = build_sidecar(cfg)  # the registry `frexport serve` exposes on /metrics
    info = [s for fam in registry.collect() for s in fam.samples if s.name == "frexport_build_info"]
    assert [(s.labels, s.value) for s in info] == [({"version": VERSION}, 1.0)]


def test_changelog_has_the_release_and_an_unreleased_section():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text and f"## [{VERSION}]" in text
    assert f"[{VERSION}]: https://github.com/frexport/frexport/releases/tag/v{VERSION}" in text


def test_chart_deploys_the_image_the_release_publishes():
    """docs/release.md pushes ghcr.io/frexport/frexport:<version>; the chart's default tag is its
    appVersion, so the two must agree or a default install pulls an image that does not exist."""
    chart = yaml.safe_load((ROOT / "helm" / "frexport" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "helm" / "frexport" / "values.yaml").read_text())
    assert chart["appVersion"] == VERSION
    assert values["image"]["repository"] == "ghcr.io/frexport/frexport" and values["image"]["tag"] == ""
    assert "-t ghcr.io/frexport/frexport:X.Y.Z" in (ROOT / "docs" / "release.md").read_text()
