"""Build the project's Dockerfile and run the image for real, without a daemon or a registry.
scripts/build-image.py is this module's command line for users (the same build the tests make).

- The base: the Dockerfile's `PYTHON_IMAGE` build argument. Registries are out of reach here, so the
  tests make a stand-in for `python:3.11-slim-bookworm` from Debian packages: `debootstrap
  --variant=minbase bookworm` plus python3 and python3-venv from the configured apt mirror, cached as
  a tarball under .tools/image-base/ (keyed by those inputs) and imported with `buildah from scratch`.
- The build: `buildah bud` (vfs storage, chroot isolation) in a scratch storage root.
- Running: `buildah run` where it suffices; for the chart's conditions (numeric user, read-only root
  filesystem, emptyDir volumes) `run_container` makes them the way a container runtime does: a private mount
  namespace (unshare), the image's root filesystem bind-mounted read-only, volumes bind-mounted onto
  it, /proc and /dev, then chroot with the user. The host's network namespace is kept (ports are
  reachable on 127.0.0.1). podman would do the same, but its runtime (crun) cannot start containers
  on every machine (cgroup v1/v2 hybrids, setrlimit refused in VMs), so it is not relied on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.paths import ROOT

TOOLS = Path(os.environ.get("FREXPORT_TOOLS", ROOT / ".tools"))
BASE_CACHE = TOOLS / "image-base"
SUITE = "bookworm"
VARIANT = "minbase"
PACKAGES = ("python3", "python3-venv")
# Bump when the way the base is made changes (what is removed after debootstrap, the tar options).
RECIPE = 1
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Removed from the base after debootstrap: apt's caches and lists, docs, man pages, locales.
PRUNE = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale")
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def missing_prerequisites() -> list[str]:
    """Why the image cannot be built and run on this machine ([] when it can)."""
    why = []
    if os.geteuid() != 0:
        why.append("not root (buildah with vfs storage, debootstrap and the mount namespace need root)")
    for tool in ("buildah", "debootstrap", "unshare", "mount", "chroot"):
        if not _which(tool):
            why.append(f"no {tool} (scripts/setup.sh installs buildah and debootstrap as root)")
    return why


def _which(tool: str) -> str | None:
    return shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin:/usr/bin:/bin")


def _tool(tool: str) -> str:
    path = _which(tool)
    if path is None:
        raise FileNotFoundError(tool)
    return path


def _run(cmd: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if out.returncode != 0:
        raise AssertionError(f"{shlex.join(cmd)} failed ({out.returncode}):\n"
                             f"{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    return out


def apt_mirror(suite: str = SUITE) -> str:
    """The Debian mirror this machine's apt uses for `suite` (one-line or deb822 sources)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
                if suite in fields.get("Suites", "").split() and "deb" in fields.get("Types", "").split():
                    return fields["URIs"].split()[0].rstrip("/")
        else:
            for line in text.splitlines():
                m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s", line + " ")
                if m and m[2] == suite:
                    return m[1].rstrip("/")
    return DEFAULT_MIRROR


def base_key() -> str:
    inputs = {"suite": SUITE, "variant": VARIANT, "packages": PACKAGES, "recipe": RECIPE, "prune": PRUNE}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]


def base_tarball() -> tuple[Path, bool]:
    """The local base's root filesystem as a tarball: (path, whether it was cached already)."""
    name = f"debian-{SUITE}-{VARIANT}-{'-'.join(PACKAGES)}-{base_key()}.tar"
    tar = BASE_CACHE / name
    if tar.is_file():
        return tar, True
    BASE_CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=BASE_CACHE, prefix=".make-") as work:
        rootfs = Path(work) / "rootfs"
        _run([_tool("debootstrap"), f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}", SUITE, str(rootfs),
              apt_mirror()], timeout=900)
        for sub in PRUNE:
            shutil.rmtree(rootfs / sub, ignore_errors=True)
            (rootfs / sub).mkdir(parents=True, exist_ok=True)
        part = Path(work) / name
        _run(["tar", "--numeric-owner", "--sort=name", "-C", str(rootfs), "-cf", str(part), "."], timeout=600)
        os.replace(part, tar)
    for old in BASE_CACHE.glob("debian-*.tar"):  # other recipes' bases
        if old != tar:
            old.unlink()
    return tar, False


class Buildah:
    """buildah with its own storage (vfs) under `home`: nothing touches the machine's images."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.base = [_tool("buildah"), "--root", str(home / "storage"), "--runroot", str(home / "run"),
                     "--storage-driver", "vfs"]

    def __call__(self, *args: str, timeout: float = 600) -> str:
        return _run([*self.base, *args], timeout=timeout).stdout.strip()

    def import_rootfs(self, tar: Path, image: str) -> None:
        ctr = self("from", "scratch")
        self("add", ctr, str(tar), "/")
        self("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "--cmd", "/bin/sh", ctr)
        self("commit", "--quiet", "--rm", ctr, image)

    def bud(self, context: Path, tag: str, build_args: dict[str, str]) -> str:
        args = ["bud", "--isolation", "chroot", "--tag", tag]
        for k, v in build_args.items():
            args += ["--build-arg", f"{k}={v}"]
        if HOST_CA_BUNDLE.is_file():
            # The host's CAs for pip in the RUN steps (a TLS-inspecting proxy); not part of the image.
            args += ["--volume", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro"]
        return self(*args, str(context), timeout=900)

    def config(self, image: str) -> dict:
        return json.loads(self("inspect", "--type", "image", image))["OCIv1"]["config"]

    def rootfs(self, image: str) -> Path:
        """A fresh container of `image`; its root filesystem on the host."""
        ctr = self("from", "--pull-never", image)
        return Path(self("mount", ctr))

    def run(self, image: str, *commands: list[str]) -> list[subprocess.CompletedProcess]:
        """`buildah run` (chroot isolation) of each command in one fresh container of the image, as its USER."""
        ctr = self("from", "--pull-never", image)
        try:
            return [subprocess.run([*self.base, "run", "--isolation", "chroot", ctr, "--", *argv],
                                   capture_output=True, text=True, timeout=120) for argv in commands]
        finally:
            self("rm", ctr)

    def destroy(self) -> None:
        subprocess.run([*self.base, "rm", "--all"], capture_output=True, timeout=120)
        subprocess.run([*self.base, "rmi", "--all", "--force"], capture_output=True, timeout=300)
        shutil.rmtree(self.home, ignore_errors=True)


def build(buildah: Buildah, tag: str, context: Path = ROOT) -> tuple[str, dict[str, float | bool]]:
    """The local base imported and the Dockerfile built as `tag`: (base image name, timings)."""
    t0 = time.monotonic()
    tar, cached = base_tarball()
    t1 = time.monotonic()
    base = f"localhost/frexport-test-base:{base_key()}"
    buildah.import_rootfs(tar, base)
    t2 = time.monotonic()
    buildah.bud(context, tag, {"PYTHON_IMAGE": base})
    return base, {"base_cached": cached, "base_s": t1 - t0, "import_s": t2 - t1, "build_s": time.monotonic() - t2}


def tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def run_container(rootfs: Path, argv: list[str], *, user: str, groups: list[int] = (), env: dict[str, str],
                  volumes: dict[str, tuple[Path, bool]] | None = None, read_only: bool, workdir: Path,
                  **popen) -> subprocess.Popen:
    """Start argv in the image's root filesystem as a container runtime would: the root read-only
    (readOnlyRootFilesystem) or not, `volumes` {container path: (host path, read_only)} mounted on
    it, /proc and /dev, the numeric `user` ("uid:gid") and supplementary `groups`, exactly `env`.
    Returns the Popen of the namespace's first process; it runs in a session of its own."""
    target = workdir / "root"
    target.mkdir(parents=True, exist_ok=True)
    mount, q = _tool("mount"), shlex.quote
    steps = [f"{mount} --make-rprivate /", f"{mount} --bind {q(str(rootfs))} {q(str(target))}"]
    for dst, (src, ro) in (volumes or {}).items():
        point = q(str(target) + dst)
        steps += [f"mkdir -p {point}", f"{mount} --bind {q(str(src))} {point}"]  # the runtime makes mount points
        if ro:
            steps.append(f"{mount} -o remount,bind,ro {point}")
    if read_only:
        steps.append(f"{mount} -o remount,bind,ro {q(str(target))}")
    steps += [f"{mount} -t proc proc {q(str(target / 'proc'))}", f"{mount} --rbind /dev {q(str(target / 'dev'))}"]
    spec = ["--userspec", user] + (["--groups", ",".join(map(str, groups))] if groups else [])
    steps.append("exec " + shlex.join([_tool("chroot"), *spec, str(target), *argv]))
    script = " && ".join(steps)
    return subprocess.Popen([_tool("unshare"), "--mount", "--fork", "--kill-child", "/bin/sh", "-c", script],
                            env=env, start_new_session=True, **popen)
