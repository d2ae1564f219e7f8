#!/usr/bin/env python3
"""Build the frexport image without Docker Hub (or any registry, or a Docker daemon).

    sudo ./scripts/build-image.py --output frexport-image.tar      # then: docker load -i / podman load -i
    sudo ./scripts/build-image.py --tag localhost/frexport:dev --push oci:/srv/images/frexport

The Dockerfile's base (`PYTHON_IMAGE`, python:3.11-slim-bookworm from Docker Hub) is replaced by a
local Debian bookworm made with debootstrap from this machine's apt mirror, plus python3 and
python3-venv (cached under .tools/image-base/); buildah builds the Dockerfile on it (vfs storage,
chroot isolation) in a scratch store, and the image leaves as a docker-archive tarball or through
`buildah push` to any destination buildah knows (oci:DIR, docker://REGISTRY/..., containers-storage:).
The same code builds the image the tests run (tests/support/image.py, tests/e2e/test_image.py).
Needs root, buildah and debootstrap (apt-get install buildah debootstrap; scripts/setup.sh does).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import image as img  # noqa: E402  (the checkout's root, above)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tag", default="localhost/frexport:dev", help="image name (default localhost/frexport:dev)")
    p.add_argument("--output", type=Path, help="write a docker-archive tarball (docker load / podman load)")
    p.add_argument("--push", metavar="DEST", help="buildah push destination, e.g. oci:DIR or docker://host/repo:tag")
    args = p.parse_args(argv)
    if not args.output and not args.push:
        p.error("say where the image goes: --output FILE and/or --push DEST")
    why = img.missing_prerequisites()
    if why:
        print("build-image: " + "; ".join(why), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="frexport-build-") as home:
        buildah = img.Buildah(Path(home))
        try:
            _, t = img.build(buildah, args.tag)
            print(f"build-image: {args.tag} built (base {'cached' if t['base_cached'] else 'made'} in "
                  f"{t['base_s']:.0f} s, Dockerfile in {t['build_s']:.0f} s)", file=sys.stderr)
            if args.output:
                buildah("push", args.tag, f"docker-archive:{args.output.resolve()}:{args.tag}", timeout=900)
                print(f"build-image: wrote {args.output}", file=sys.stderr)
            if args.push:
                buildah("push", args.tag, args.push, timeout=900)
                print(f"build-image: pushed to {args.push}", file=sys.stderr)
        except AssertionError as exc:  # a failed step: its command and output
            print(f"build-image: {exc}", file=sys.stderr)
            return 1
        finally:
            buildah.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
