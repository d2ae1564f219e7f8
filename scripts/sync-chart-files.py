#!/usr/bin/env python3
"""Copy the alert rules and the dashboards into the Helm chart.

The chart carries real copies, not symlinks, so that copying helm/frexport alone (vendoring it,
`helm pull`, a Git subtree) works. config/prometheus/frexport-rules.yaml and dashboards/*.json stay
the one source: run this after editing them; tests/unit/test_chart_files.py fails until you do."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "frexport"


def pairs() -> list[tuple[Path, Path]]:
    """(source, copy in the chart) for every file the chart carries."""
    out = [(ROOT / "config" / "prometheus" / "frexport-rules.yaml", CHART / "files" / "frexport-rules.yaml")]
    out += [(p, CHART / "dashboards" / p.name) for p in sorted((ROOT / "dashboards").glob("*.json"))]
    return out


def stale() -> list[Path]:
    """Copies that differ from their source, and chart dashboards whose source is gone."""
    wanted = {dst for _, dst in pairs()}
    bad = [dst for src, dst in pairs() if not dst.is_file() or dst.is_symlink() or dst.read_bytes() != src.read_bytes()]
    return bad + sorted(p for p in (CHART / "dashboards").glob("*.json") if p not in wanted)


def main() -> int:
    for p in (CHART / "dashboards").glob("*.json"):
        p.unlink()
    for src, dst in pairs():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        print(f"{os.path.relpath(src, ROOT)} -> {os.path.relpath(dst, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
