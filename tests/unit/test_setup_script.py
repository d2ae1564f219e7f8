"""scripts/setup.sh installs every tool the set-up uses (a fresh Debian has no npm, node or unzip),
and what a user's own install makes stays out of git."""

import re
import subprocess

from tests.support.paths import ROOT

SETUP = (ROOT / "scripts" / "setup.sh").read_text()
TOOLS = (ROOT / "scripts" / "install-tools.sh").read_text()


def _provided() -> dict[str, str]:
    """command -> the Debian package setup.sh installs when the command is missing."""
    return dict(re.findall(r'command -v (\S+) >/dev/null 2>&1 \|\| APT\+=\((\S+)\)', SETUP))


def test_every_tool_install_tools_needs_is_installed_by_setup():
    needed = set(re.findall(r'\bneed (\S+) "apt-get install (\S+)"', TOOLS))
    assert {tool for tool, _ in needed} >= {"npm", "node", "unzip"}
    provided = _provided()
    for tool, package in needed:
        assert provided.get(tool) == package, f"setup.sh does not install {package} for {tool}"


def test_setup_installs_what_its_own_steps_run():
    provided = _provided()
    for tool in ("promtool", "buildah", "debootstrap", "gcc"):
        assert tool in provided
    assert "import ensurepip' 2>/dev/null || APT+=(python3-venv)" in SETUP  # python3 -m venv


def test_the_readmes_venv_is_ignored():
    assert "python3 -m venv venv" in (ROOT / "README.md").read_text()
    for path in ("venv/bin/python", "venv/lib/x.py", "sub/venv/bin/python", ".venv"):
        out = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, timeout=30)
        assert out.returncode == 0, f"{path} is not ignored by git"
