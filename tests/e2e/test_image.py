"""The sidecar image, built from the Dockerfile and run for real (tests/support/image.py says how):
the chart's own containers (rendered by helm with ci/local-image-values.yaml) run in it with their
command, args, env, user, fsGroup, read-only root filesystem and emptyDir volumes: the init step
prepares the shared volume and injects the agent, the sidecar serves /metrics on real dumps, and the
injected agent imports in a trainer image that has no frexport installed."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import image as img
from tests.support.helm_tools import CHART, Helm
from tests.support.paths import REAL_FIXTURES, ROOT
from tests.support.ports import free_port

pytestmark = pytest.mark.slow

VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "frexport" / "__init__.py").read_text(), re.M)[1]
LOCAL_VALUES = CHART / "ci" / "local-image-values.yaml"
DUMPS = REAL_FIXTURES / "stuck_before_collective"
# What the kubelet would put into fieldRef env values of the example Job's pods.
FIELDS = {"metadata.name": "t-frexport-example-0-x7k2p", "metadata.namespace": "ml", "spec.nodeName": "node-1"}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """(buildah, image name, its config, its root filesystem, the base image name): built once."""
    why = img.missing_prerequisites()
    if why:
        message = "cannot build and run the image here: " + "; ".join(why)
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    values = yaml.safe_load(LOCAL_VALUES.read_text())["image"]
    name = f"{values['repository']}:{values['tag']}"
    buildah = img.Buildah(tmp_path_factory.mktemp("buildah"))
    try:
        base, t = img.build(buildah, name)  # what scripts/build-image.py does for users
        config = buildah.config(name)
        rootfs = buildah.rootfs(name)
        size, venv = img.tree_bytes(rootfs), img.tree_bytes(rootfs / "opt" / "frexport")
        print(f"\nimage {name}: {size / 1e6:.0f} MB uncompressed ({venv / 1e6:.0f} MB of it /opt/frexport, the rest"
              f" the base); base {'cached' if t['base_cached'] else 'made'} in {t['base_s']:.1f} s, imported in "
              f"{t['import_s']:.1f} s, Dockerfile built in {t['build_s']:.1f} s")
        yield buildah, name, config, rootfs, base
    finally:
        buildah.destroy()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The example Job's pod spec as the chart renders it for the locally built image."""
    port = free_port()
    out = Helm(tmp_path_factory.mktemp("helm")).template(
        "-f", str(LOCAL_VALUES), "--set", "example.enabled=true", "--set", "sidecar.stallAfter=1s",
        "--set", f"sidecar.port={port}")
    [job] = [d for d in yaml.safe_load_all(out) if d and d["kind"] == "Job"]
    return job["spec"]["template"]["spec"], port


def _env(image_env: list[str], container: dict) -> dict[str, str]:
    """The container's environment as the kubelet makes it: the image's, then the spec's in order,
    $(NAME) expanded from the ones before."""
    env = dict(e.split("=", 1) for e in image_env)
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), str(e["value"]))
        else:
            env[e["name"]] = FIELDS.get(e["valueFrom"]["fieldRef"]["fieldPath"], "train")
    return env


class Pod:
    """The pod's emptyDir volumes (owned by fsGroup, setgid, as the kubelet makes them) and its
    containers started from the image the way a runtime would."""

    def __init__(self, spec: dict, rootfs: Path, config: dict, home: Path) -> None:
        self.spec, self.rootfs, self.config, self.home = spec, rootfs, config, home
        self.fs_group = spec["securityContext"]["fsGroup"]
        self.volumes = {}
        for v in spec["volumes"]:
            if "emptyDir" in v:
                d = home / "volumes" / v["name"]
                d.mkdir(parents=True)
                os.chown(d, 0, self.fs_group)
                os.chmod(d, 0o2777)
                self.volumes[v["name"]] = d

    def container(self, name: str) -> dict:
        [c] = [c for c in self.spec.get("initContainers", []) + self.spec["containers"] if c["name"] == name]
        return c

    def start(self, c: dict, **popen) -> subprocess.Popen:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] and sc["runAsUser"] != 0
        argv = c.get("command") or self.config["Entrypoint"]
        argv = argv + (c.get("args") if "args" in c else ([] if "command" in c else self.config.get("Cmd", [])))
        volumes = {m["mountPath"]: (self.volumes[m["name"]], m.get("readOnly", False)) for m in c["volumeMounts"]}
        workdir = self.home / c["name"]
        return img.run_container(self.rootfs, argv, user=f"{sc['runAsUser']}:{sc['runAsGroup']}",
                                 groups=[self.fs_group], env=_env(self.config["Env"], c), volumes=volumes,
                                 read_only=sc.get("readOnlyRootFilesystem", False), workdir=workdir, **popen)

    def run(self, name: str, timeout: float = 120) -> subprocess.CompletedProcess:
        c = self.container(name)
        proc = self.start(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


def _metrics(port: int) -> list:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return [s for fam in text_string_to_metric_families(r.read().decode()) for s in fam.samples]


def test_image_is_configured_as_the_chart_expects(image, job):
    _buildah, _name, config, rootfs, _base = image
    spec, _port = job
    sidecar = [c for c in spec["initContainers"] if c["name"] == "frexport"][0]
    sc = sidecar["securityContext"]
    assert config["User"] == f"{sc['runAsUser']}:{sc['runAsGroup']}" == "65532:65532"
    assert config["Entrypoint"] == ["frexport"] and config["Cmd"] == ["serve", "--help"]
    assert "9464/tcp" in config["ExposedPorts"]
    assert config["Labels"]["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert any(e.startswith("PATH=/opt/frexport/bin:") for e in config["Env"])
    site = list((rootfs / "opt" / "frexport" / "lib").glob("python3*/site-packages"))
    assert len(site) == 1 and (site[0] / "frexport" / "agent" / "_bootstrap" / "sitecustomize.py").is_file()
    assert not (site[0] / "torch").exists() and (site[0] / "opentelemetry" / "exporter").is_dir()  # otlp extra
    assert (site[0] / "bcrypt").is_dir()  # auth extra
    assert not (rootfs / "src").exists()  # the build stage stays behind
    # pip and setuptools only install: the image never runs them (neither its venv's nor the base's)
    assert not list(site[0].glob("pip*")) and not list(site[0].glob("setuptools*"))
    assert not (rootfs / "opt" / "frexport" / "bin" / "pip").exists()


def test_the_image_runs_no_pip(image):
    buildah, name, _config, _rootfs, _base = image
    # the answer is the exit status (7: no pip): buildah run now and then loses the process's stderr
    no_pip = "import importlib.util, sys; sys.exit(7 if importlib.util.find_spec('pip') is None else 0)"
    base_pip, venv_pip = buildah.run(name, ["python3", "-c", no_pip], ["/opt/frexport/bin/python", "-c", no_pip])
    assert base_pip.returncode == 7, (base_pip.stdout, base_pip.stderr)
    assert venv_pip.returncode == 7, (venv_pip.stdout, venv_pip.stderr)


def test_buildah_run_as_the_image_user(image):
    buildah, name, _config, _rootfs, _base = image
    version, uid = buildah.run(name, ["frexport", "--version"], ["id", "-u"])
    # built with the compiled scanner (the Dockerfile's build stage has a compiler): the sidecar's pickles
    # and `docker run ... analyze` take the fast path
    assert (version.returncode, version.stdout) == (0, f"frexport {VERSION} (compiled scanner: yes)\n"), \
        version.stderr
    assert uid.stdout.strip() == "65532", uid.stdout + uid.stderr


def test_analyze_in_the_image_as_the_chart_user_with_a_read_only_root(image, tmp_path):
    _buildah, _name, config, rootfs, _base = image
    env = dict(e.split("=", 1) for e in config["Env"])
    proc = img.run_container(rootfs, ["frexport", "analyze", "/dumps"], user="65532:65532", env=env,
                             volumes={"/dumps": (DUMPS, True)}, read_only=True, workdir=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err  # 1: findings
    assert "missing_rank [root cause]" in out and "culprit: 2   blocked: 0, 1, 3" in out


def test_the_read_only_root_is_really_read_only(image, tmp_path):
    """The harness's own check: even root cannot write to the image's files, only to a volume."""
    _buildah, _name, config, rootfs, _base = image
    env = dict(e.split("=", 1) for e in config["Env"])
    vol = tmp_path / "vol"
    vol.mkdir()
    code = ("import errno\nfor p in ('/opt/frexport/x', '/tmp/x', '/vol/x'):\n"
            "    try:\n        open(p, 'w').close(); print(p, 'written')\n"
            "    except OSError as e:\n        print(p, errno.errorcode[e.errno])\n")
    proc = img.run_container(rootfs, ["python3", "-c", code], user="0:0", env=env, volumes={"/vol": (vol, False)},
                             read_only=True, workdir=tmp_path / "w", stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert out.split("\n")[:3] == ["/opt/frexport/x EROFS", "/tmp/x EROFS", "/vol/x written"], out


def test_chart_pod_prepares_the_volume_then_the_sidecar_serves_metrics(image, job, tmp_path):
    _buildah, _name, config, rootfs, _base = image
    spec, port = job
    pod = Pod(spec, rootfs, config, tmp_path)
    init = pod.run("frexport-init")
    assert init.returncode == 0, init.stdout
    shared = pod.volumes["frexport-shared"]
    assert (shared / "dumps").stat().st_mode & 0o7777 == 0o1777 and (shared / "evidence").is_dir()

    shutil.copytree(DUMPS, shared / "dumps", dirs_exist_ok=True)  # what the trainer's ranks dump
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        proc = pod.start(pod.container("frexport"), stdout=out, stderr=subprocess.STDOUT)
    try:
        statuses, deadline = {}, time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                samples = _metrics(port)
                statuses = {s.labels["rank"]: s.labels["status"] for s in samples
                            if s.name == "frexport_rank_status" and s.value == 1.0}
            except OSError:
                pass
            # a finished bundle (its manifest is written last): stopping the pod's process group while
            # one is written kills the decoder process analysing it, an error in the log
            if statuses.get("2") == "stalled" and list((shared / "evidence").glob("[!.]*/manifest.json")):
                break
            time.sleep(0.3)
        assert statuses == {"0": "blocked", "1": "blocked", "2": "stalled", "3": "blocked"}, log.read_text()
        assert any(s.name == "frexport_build_info" and s.labels == {"version": VERSION} for s in samples)
        # The evidence bundle was written by the non-root sidecar onto the shared volume.
        assert list((shared / "evidence").glob("[!.]*/manifest.json")), log.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
    text = log.read_text()
    assert "Read-only file system" not in text and "Traceback" not in text, text


def test_chart_init_injects_an_agent_that_works_in_a_trainer_without_frexport(image, job, tmp_path):
    _buildah, _name, config, rootfs, base = image
    spec, _port = job
    pod = Pod(spec, rootfs, config, tmp_path)
    agent = pod.volumes["frexport-agent"]
    assert not any(agent.iterdir())
    init = pod.run("frexport-init")
    assert init.returncode == 0, init.stdout
    launcher = agent / "bin" / "frexport-launch"
    assert (agent / "frexport" / "agent" / "_bootstrap" / "sitecustomize.py").is_file()
    assert launcher.stat().st_mode & 0o111 and f"frexport {VERSION} image" in launcher.read_text()
    assert not list(agent.rglob("__pycache__"))

    # The trainer: the Debian python3 base (no frexport in it), its own user, the agent volume as the
    # chart mounts it there (read-only).
    [trainer] = spec["containers"]
    [mount] = [m for m in trainer["volumeMounts"] if m["name"] == "frexport-agent"]
    trainer_root = image[0].rootfs(base)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}
    code = ("import frexport.agent, frexport.agent.launch as l, os; "
            "print(frexport.agent.__file__, os.path.isdir(l.BOOTSTRAP))")
    script = (f"python3 -c 'import frexport' 2>/dev/null && echo 'frexport already there'; "
              f"PYTHONPATH={mount['mountPath']} python3 -c '{code}' && {mount['mountPath']}/bin/frexport-launch --help")
    proc = img.run_container(trainer_root, ["/bin/sh", "-c", script], user="1000:1000", groups=[pod.fs_group], env=env,
                             volumes={mount["mountPath"]: (agent, True)}, read_only=False, workdir=tmp_path / "trainer",
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "frexport already there" not in out
    assert f"{mount['mountPath']}/frexport/agent/__init__.py True" in out and "usage: frexport-launch" in out, out
