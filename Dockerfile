# podgpu's image. Built and smoke-tested by scripts/image (so by scripts/check and CI), released
# for linux/amd64 and linux/arm64 by .github/workflows/release.yml (docs/deploy.md, "Image").
#
# One Python minor everywhere: CPython 3.13 (Debian 13 "trixie"'s python3, and the minor
# requirements.lock is resolved for by scripts/lock). BASE is the runtime base, BUILD_BASE the
# build stage's; both must hold the same interpreter at the same path (the virtual environment
# copied between them points at it):
# - CI and the release: scripts/image makes both bases from Debian trixie packages with
#   mmdebstrap and passes them as --build-arg BASE=... BUILD_BASE=...; the release workflow
#   pushes those bases and builds the published image on them, so it ships the base CI tests;
# - a plain `docker build .`: the official python:3.13-slim-trixie, pinned by its
#   multi-platform index digest (the defaults below).
#
# The build resolves nothing: every runtime dependency is pinned with hashes in requirements.lock
# and the build backend (setuptools) in deploy/image/build-backend.lock; both are installed with
# --require-hashes --no-deps --only-binary=:all:, and podgpu itself is built without build
# isolation, so pip never asks an index which version to take.
ARG BASE=docker.io/library/python:3.13-slim-trixie@sha256:9662417aace5ae7b8e2609cce472b72a8958e134ba372808abe9cc1a0c0125e6
ARG BUILD_BASE=${BASE}

FROM ${BUILD_BASE} AS build
# PIP_CERT: a CA bundle for networks that intercept TLS; scripts/image mounts the host's for the
# build only (it is not in any layer). Unset elsewhere.
ARG PIP_CERT
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PIP_NO_INPUT=1
WORKDIR /src
COPY requirements.lock deploy/image/build-backend.lock ./
# The venv has no pip of its own: the base's pip installs into it (`--python`), so the final
# image carries no installer. Wheels only, so no compiler is needed either.
RUN --mount=type=cache,target=/root/.cache/pip,sharing=locked \
    python3.13 -m venv --without-pip /opt/podgpu \
 && python3 -m pip --python /opt/podgpu/bin/python install --require-hashes --no-deps \
      --only-binary=:all: --no-compile -r requirements.lock \
 && python3 -m pip install --require-hashes --no-deps --only-binary=:all: --no-compile \
      --target /tmp/backend -r build-backend.lock
COPY pyproject.toml README.md ./
COPY src ./src
RUN PYTHONPATH=/tmp/backend python3 -m pip wheel --no-deps --no-build-isolation -w /tmp/wheel . \
 && python3 -m pip --python /opt/podgpu/bin/python install --no-deps --no-compile /tmp/wheel/podgpu-*.whl \
 && rm -rf /tmp/backend /tmp/wheel
COPY deploy/image/prune-site-packages.sh /tmp/
# Bytecode is compiled here, once, with hash-based "unchecked" validation: the interpreter uses
# the .pyc without comparing it to the source's mtime (which a layer copy may change), so a
# read-only container never compiles at import (that cost ~60 MiB of start-up RSS).
RUN sh /tmp/prune-site-packages.sh "$(/opt/podgpu/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
 && /opt/podgpu/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/podgpu/lib \
 && /opt/podgpu/bin/python -c "import podgpu.cli, podgpu.attribution.kubelet, podgpu.sinks.cloudwatch"

FROM ${BASE}
LABEL org.opencontainers.image.title="podgpu" \
      org.opencontainers.image.description="Per-pod NVIDIA GPU metrics: dcgm-exporter-compatible /metrics and CloudWatch EMF from NVML" \
      org.opencontainers.image.source="https://github.com/podgpu/podgpu" \
      org.opencontainers.image.licenses="Apache-2.0"
# The interpreter's own standard library, compiled the same way (the official image ships none
# of its .pyc files, Debian's packages compile them in a maintainer script that never ran here).
# Exec form: the Debian-made base has no shell.
RUN ["python3.13", "-c", "import compileall, py_compile, sysconfig; compileall.compile_dir(sysconfig.get_path('stdlib'), quiet=2, workers=0, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)"]
COPY --from=build /opt/podgpu /opt/podgpu
# dcgm-exporter's stock metric lists at the paths its Helm chart and the GPU Operator pass, so
# this image can be swapped into an existing dcgm-exporter DaemonSet.
COPY etc/default-counters.csv etc/dcp-metrics-included.csv /etc/dcgm-exporter/
ENV PATH=/opt/podgpu/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# The default user is root, on purpose (docs/deploy.md, "Which user"): the kubelet's
# pod-resources socket is root-only, and where the pod spec sets no user (the GPU Operator's
# exporter DaemonSet, whose ClusterPolicy can change the image but not the securityContext)
# only root gets pod labels. podgpu's own DaemonSet sets UID 0 explicitly with every capability
# dropped; without -k any UID works (`--user 65532`).
# hadolint ignore=DL3002
USER 0:0
EXPOSE 9400
ENTRYPOINT ["podgpu"]
CMD ["serve"]
