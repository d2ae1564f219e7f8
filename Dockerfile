# frexport sidecar image: `frexport serve` next to a PyTorch trainer (no torch inside).
#   docker build -t ghcr.io/frexport/frexport:0.1.0 .
# The Helm chart (helm/frexport) runs it as user 65532 with a read-only root filesystem; its init
# step also copies the pure-Python agent out of this image into the trainer (agent.inject).
#
# Pinned base: Debian 12 slim with CPython 3.11.13. For reproducible builds pin the digest too:
#   docker buildx imagetools inspect python:3.11.13-slim-bookworm   ->   FROM python:3.11.13-slim-bookworm@sha256:<digest>
# Any Debian-based image with python3 and its venv module works as the base. Without Docker Hub:
# scripts/build-image.py builds this file on a local Debian bookworm base (debootstrap,
# python3-venv) with buildah, as tests/e2e/test_image.py does; README.md, "Installing".
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A C compiler for frexport's compiled pickle scanner (frexport/decode/_scan.c): without it pip would
# install the pure-Python path (the same results at about 2.5x the CPU). python:*-slim has Python's
# headers; a Debian python3 base (scripts/build-image.py) gets them from python3-dev. This stage only.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && { python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
      || apt-get install -y --no-install-recommends python3-dev; } \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY frexport ./frexport
# The wheel is built here, with the scanner compiled (the build fails where `frexport --version`
# says it is not), and installed into the venv the final stage copies. The OTLP exporters
# (traces.enabled) and bcrypt (web-config basic auth) are optional extras. pip and setuptools only
# install: the image never runs them, so they leave (fewer files, fewer CVEs).
RUN python3 -m venv /opt/frexport \
 && /opt/frexport/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && WHEEL=$(echo /wheels/frexport-*.whl) \
 && /opt/frexport/bin/pip install --no-cache-dir "${WHEEL}[otlp,auth]" \
 && /opt/frexport/bin/frexport --version | grep -F "(compiled scanner: yes)" \
 && /opt/frexport/bin/python -m pip uninstall --yes pip setuptools \
 && /opt/frexport/bin/python -m compileall -q /opt/frexport/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="frexport" \
      org.opencontainers.image.description="PyTorch Flight Recorder exporter: hang diagnosis, Prometheus metrics, OpenTelemetry traces" \
      org.opencontainers.image.source="https://github.com/frexport/frexport" \
      org.opencontainers.image.licenses="Apache-2.0"
# The base's own pip, setuptools and wheel (python:*-slim has them; a Debian python3 has not) go too.
RUN if python3 -m pip --version >/dev/null 2>&1; then python3 -m pip uninstall --yes --no-cache-dir pip setuptools wheel; fi \
 && rm -f /usr/local/bin/pip /usr/local/bin/pip3 /usr/local/bin/pip3.*
COPY --from=build /opt/frexport /opt/frexport
ENV PATH=/opt/frexport/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same numeric user the chart's securityContext uses (runAsNonRoot needs a numeric USER).
RUN groupadd --system --gid 65532 frexport \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin frexport
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["frexport"]
CMD ["serve", "--help"]
