"""The chart carries real copies of the rules and dashboards (no symlinks), kept equal to their source."""

from __future__ import annotations

import importlib.util
import os

from tests.support.paths import ROOT

_spec = importlib.util.spec_from_file_location("sync_chart_files", ROOT / "scripts" / "sync-chart-files.py")
sync = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sync)


def test_no_symlinks_under_helm():
    links = [os.path.join(d, n) for d, dirs, files in os.walk(ROOT / "helm") for n in dirs + files
             if os.path.islink(os.path.join(d, n))]
    assert links == [], "copying helm/<chart> alone must work: replace symlinks by files"


def test_chart_copies_equal_their_source():
    assert len(sync.pairs()) >= 2
    assert sync.stale() == [], "run scripts/sync-chart-files.py"


def test_a_stale_copy_is_reported(tmp_path, monkeypatch):
    chart = tmp_path / "helm" / "frexport"
    monkeypatch.setattr(sync, "CHART", chart)
    sync.main()
    assert sync.stale() == []
    (chart / "files" / "frexport-rules.yaml").write_text("groups: []\n")
    (chart / "dashboards" / "gone.json").write_text("{}")
    assert sync.stale() == [chart / "files" / "frexport-rules.yaml", chart / "dashboards" / "gone.json"]
