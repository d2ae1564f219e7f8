"""The dependency rule of docs/architecture.md, read from every import in the package (also the
ones inside functions): data flows one way, source -> decode -> state -> analysis -> exporters."""

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
    # exporters only read; a source's health is its self-metrics, read like the state
    "export": {"model", "analysis", "live", "sources.health", "files", "logs", "config"},
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
