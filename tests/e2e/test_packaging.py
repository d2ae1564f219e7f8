"""The distributions as a user gets them: `python -m build` makes an sdist and a wheel (the wheel
built from the sdist, as pip would), `twine check` passes, and the wheel installed into a clean venv
runs `frexport --version`, `frexport analyze` and `frexport-launch --help` away from the checkout.
The wheel carries the compiled scanner; the sdist built where no C compiler works still installs and
analyzes on the pure-Python path."""

import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile

import pytest

from tests.support.paths import REAL_FIXTURES, ROOT

pytestmark = pytest.mark.slow

VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "frexport" / "__init__.py").read_text(), re.M)[1]


def _run(cmd, timeout=300, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def _clean_env():
    # Nothing from the checkout (its frexport.egg-info on PYTHONPATH) or the test venv may leak in.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    r = _run([sys.executable, "-m", "build", "--outdir", out, ROOT], timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    # a platform wheel: it carries the compiled scanner (decode/_scan.c) for this interpreter
    wheels = list(out.glob(f"frexport-{VERSION}-cp*-linux_*.whl"))
    sdist = out / f"frexport-{VERSION}.tar.gz"
    assert len(wheels) == 1 and sorted(out.iterdir()) == sorted([wheels[0], sdist]), list(out.iterdir())
    return wheels[0], sdist


@pytest.fixture(scope="module")
def installed(dists, tmp_path_factory):
    """A venv of its own with the wheel and its runtime dependencies only."""
    env_dir = tmp_path_factory.mktemp("venv") / "v"
    venv.create(env_dir, with_pip=True)
    r = _run([env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", dists[0]], timeout=600,
             cwd=env_dir, env=_clean_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return env_dir / "bin"


def test_twine_check_passes(dists):
    r = _run([sys.executable, "-m", "twine", "check", "--strict", *dists])
    assert r.returncode == 0 and r.stdout.count("PASSED") == 2, r.stdout + r.stderr


def test_wheel_carries_the_agent_bootstrap_license_and_entry_points(dists):
    names = set(zipfile.ZipFile(dists[0]).namelist())
    info = f"frexport-{VERSION}.dist-info"
    assert "frexport/agent/_bootstrap/sitecustomize.py" in names  # not a package: package data
    assert f"{info}/licenses/LICENSE" in names
    assert not any(n.startswith("tests/") for n in names)
    meta = zipfile.ZipFile(dists[0]).read(f"{info}/METADATA").decode()
    assert f"Version: {VERSION}\n" in meta and "License-Expression: Apache-2.0\n" in meta
    scripts = zipfile.ZipFile(dists[0]).read(f"{info}/entry_points.txt").decode()
    assert "frexport = frexport.cli.main:main" in scripts and "frexport-launch = frexport.agent.launch:main" in scripts
    with tarfile.open(dists[1]) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    sources = {"frexport/decode/_scan.c", "frexport/decode/_scan_fields.h", "frexport/model/_rows.c",
               "frexport/analysis/_straggler.c", "frexport/_group_columns.h"}
    assert {"LICENSE", "CHANGELOG.md", "SECURITY.md", "README.md", "pyproject.toml", "setup.py",
            "frexport/agent/_bootstrap/sitecustomize.py", *sources} <= members
    assert not any(m.endswith(".so") for m in members)  # sources only
    # the wheel is built from the sdist: every compiled module is in it (they are optional: a build that
    # fails, a header the sdist lacks, says nothing), and no C source or header is
    for module in ("decode/_scan", "model/_rows", "analysis/_straggler"):
        assert any(n.startswith(f"frexport/{module}.") and n.endswith(".so") for n in names), module
    assert not sources & names


def test_installed_wheel_runs_away_from_the_checkout(installed, tmp_path):
    env = _clean_env()
    where = _run([installed / "python", "-c", "import frexport; print(frexport.__file__)"], cwd=tmp_path, env=env)
    assert str(installed.parent) in where.stdout and str(ROOT) not in where.stdout, where.stdout + where.stderr

    r = _run([installed / "frexport", "--version"], cwd=tmp_path, env=env)
    assert (r.returncode, r.stdout) == (0, f"frexport {VERSION} (compiled scanner: yes)\n"), r.stderr

    r = _run([installed / "frexport", "analyze", REAL_FIXTURES / "stuck_before_collective"], cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stdout + r.stderr  # 1: findings
    assert "missing_rank [root cause]" in r.stdout and "rank 2 has not issued all_reduce" in r.stdout

    r = _run([installed / "frexport-launch", "--help"], cwd=tmp_path, env=env)
    assert r.returncode == 0 and "usage: frexport-launch" in r.stdout, r.stdout + r.stderr

    r = _run([installed / "python", "-c", "from frexport.decode import scanned; print(scanned.available())"],
             cwd=tmp_path, env=env)
    assert r.stdout == "True\n", r.stdout + r.stderr

    # Runtime dependencies only: no torch, no test tools came along.
    r = _run([installed / "python", "-m", "pip", "list", "--format=freeze"], cwd=tmp_path, env=env)
    names = {line.split("==")[0].lower().replace("_", "-") for line in r.stdout.split()}
    assert {"frexport", "prometheus-client", "watchdog", "pyyaml", "opentelemetry-sdk"} <= names
    assert not names & {"torch", "pytest", "hypothesis", "ruff"}


def test_installed_agent_bootstrap_is_found_by_the_launcher(installed, tmp_path):
    """frexport-launch puts the installed _bootstrap directory on PYTHONPATH: it must exist there."""
    code = ("import os, frexport.agent.launch as l; p = os.path.join(l.BOOTSTRAP, 'sitecustomize.py'); "
            "print(os.path.isfile(p), p)")
    r = _run([installed / "python", "-c", code], cwd=tmp_path, env=_clean_env())
    assert r.stdout.startswith("True ") and str(installed.parent) in r.stdout, r.stdout + r.stderr


def test_sdist_installs_and_analyzes_without_a_compiler(dists, tmp_path):
    """The extension is optional: with no working C compiler the build goes on without it, and
    analyze gives the same report on the pure-Python path."""
    env_dir = tmp_path / "v"
    venv.create(env_dir, with_pip=True)
    env = dict(_clean_env(), CC="false", LDSHARED="false")  # every compile and link fails
    r = _run([env_dir / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-cache-dir", dists[1]],
             timeout=600, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    bin_ = env_dir / "bin"
    r = _run([bin_ / "python", "-c", "from frexport.decode import scanned; print(scanned.available())"],
             cwd=tmp_path, env=_clean_env())
    assert r.stdout == "False\n", r.stdout + r.stderr
    r = _run([bin_ / "frexport", "--version"], cwd=tmp_path, env=_clean_env())
    assert r.stdout.startswith(f"frexport {VERSION} (compiled scanner: no - not built ("), r.stdout + r.stderr
    r = _run([bin_ / "frexport", "analyze", REAL_FIXTURES / "stuck_before_collective"], cwd=tmp_path, env=_clean_env())
    assert r.returncode == 1, r.stdout + r.stderr
    assert "frexport analyze: warning: the compiled pickle scanner is not in use" in r.stderr  # said, once
    assert "missing_rank [root cause]" in r.stdout and "rank 2 has not issued all_reduce" in r.stdout
