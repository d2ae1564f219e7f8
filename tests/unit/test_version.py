"""The version lives in one place, frexport/__init__.py: the package metadata, `frexport --version`,
the frexport_build_info metric, the changelog and the chart's default image tag all follow it."""

import re

import pytest
import tomllib
import yaml

import frexport
from frexport.cli.main import main
from frexport.export.prometheus import FrexportCollector
from frexport.live.state import LiveState
from frexport.sources.health import HealthRegistry
from tests.support.paths import ROOT

VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "frexport" / "__init__.py").read_text(), re.M)[1]


def test_version_is_semver_and_written_nowhere_else():
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?", VERSION)
    assert frexport.__version__ == VERSION
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "frexport.__version__"}


def test_cli_version_shows_it(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"frexport {VERSION}\n"


def test_build_info_metric_shows_it():
    families = {m.name: m for m in FrexportCollector(LiveState(), HealthRegistry()).collect()}
    [sample] = families["frexport_build_info"].samples
    assert sample.labels == {"version": VERSION} and sample.value == 1.0


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
