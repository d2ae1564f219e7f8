"""The dependency rule of docs/architecture.md, read from every import in the package (also the
ones inside functions): data flows one way, source -> decode -> state -> analysis -> evidence ->
exporters."""

import ast
from pathlib import Path

import frexport

PACKAGE = Path(frexport.__file__).parent

# What each part may import, besides itself and the standard library / third-party packages.
ALLOWED = {
    "model": set(),
    "decode": {"model"},
    "sources": {"model", "decode", "config", "logs"},
    "analysis": {"model"},
    "live": {"model", "decode", "sources", "analysis", "config", "logs"},
    # the evidence stage: fed by the live passes and the sources' answers (sources/handlers.py), it
    # hands the exporters what to write, and imports none of them
    "evidence": {"model", "decode", "sources", "analysis", "live", "logs"},
    # exporters only read and write what they are handed; of the sources only a source's health,
    # its self-metrics, read like the state
    "export": {"model", "analysis", "live", "evidence", "sources.health", "files", "logs", "config"},
    "web": {"config"},
    "agent": {"files"},  # the trainer side: nothing of the sidecar
    "inject": set(),  # pod-template patching for frexport inject (and a webhook): plain dicts, no sidecar code
    "cli": {"*"},
    "config": set(), "logs": set(), "files": set(), "__init__": set(), "__main__": {"cli"},
}


def _part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "frexport" or m.startswith("frexport.")}


def test_every_import_follows_the_dependency_rule():
    broken = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts)
        part = _part(module) if rel.parts[-1] != "__init__" or len(rel.parts) > 2 else "__init__"
        allowed = ALLOWED[part]
        for imported in _imports(path):
            target = imported[len("frexport."):] if imported != "frexport" else "__init__"
            top = target.split(".")[0]
            ok = ("*" in allowed or top == part or top in allowed or target in allowed
                  or any(target.startswith(a + ".") for a in allowed) or target == "__init__")
            if not ok:
                broken.append(f"{module} imports {imported}")
    assert broken == []


def test_the_rule_catches_a_backward_import(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from frexport.live.state import LiveState\n")
    assert _imports(bad) == {"frexport.live.state"}
    assert "live" not in ALLOWED["sources"] and "export" not in ALLOWED["live"]


def test_the_evidence_stage_sits_between_the_sources_and_the_exporters():
    """Exporters never fetch (no source but its health), the stage never writes (no exporter), and
    nothing upstream (sources, live, analysis) reaches into the stage."""
    assert not any(a.startswith("sources") and a != "sources.health" for a in ALLOWED["export"])
    assert "export" not in ALLOWED["evidence"] and "cli" not in ALLOWED["evidence"]
    assert all("evidence" not in ALLOWED[part] for part in ("model", "decode", "sources", "analysis", "live"))
    for path in sorted((PACKAGE / "export").rglob("*.py")):
        assert not {m for m in _imports(path) if m.startswith("frexport.sources.")} - {"frexport.sources.health"}, path
    for path in sorted((PACKAGE / "evidence").rglob("*.py")):
        assert not {m for m in _imports(path) if m.startswith(("frexport.export", "frexport.cli"))}, path
