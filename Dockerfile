# syntax=docker/dockerfile:1
# paretune images, built from the wheel (never an editable install of the source tree):
#   docker build -t paretune .                                   # control plane (the last stage)
#   docker build --target cpu-worker -t paretune-cpu-worker .    # worker for the cpu backend
# The GPU worker image is deploy/gpu-worker.Dockerfile (an NVIDIA CUDA base).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# The wheel: migrations included (deploy/build_hooks.py), as `pip install paretune` gets it.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/build_hooks.py deploy/build_hooks.py
COPY migrations migrations
COPY service service
COPY workers workers
COPY wire wire
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Two virtual environments from the same wheel: the worker alone, and the control plane.
FROM ${PYTHON_IMAGE} AS worker-venv
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/paretune \
    && /opt/paretune/bin/pip install --no-cache-dir /wheels/paretune-*.whl

FROM ${PYTHON_IMAGE} AS service-venv
COPY --from=wheel /wheels /wheels
RUN python -m venv /opt/paretune \
    && /opt/paretune/bin/pip install --no-cache-dir "$(echo /wheels/paretune-*.whl)[service]"

# An unprivileged user (uid 10001) owns the data directory and the secrets mount point;
# Kubernetes' runAsNonRoot checks the numeric uid.
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 paretune \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/paretune --create-home paretune \
    && mkdir -p /var/lib/paretune/secrets \
    && chown -R 10001:10001 /var/lib/paretune
ENV PATH=/opt/paretune/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PARETUNE_DATA_DIR=/var/lib/paretune
WORKDIR /var/lib/paretune

# The cpu backend compiles C with gcc; tini reaps the trial sandboxes' orphans and passes
# SIGTERM to the agent, which then drains (finishes or hands back its trials).
FROM runtime AS cpu-worker
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=worker-venv /opt/paretune /opt/paretune
USER 10001:10001
ENTRYPOINT ["tini", "--"]
CMD ["paretune", "worker", "--help"]

# The control plane (default target). Replicas do not migrate: the migration job, or the
# compose `migrate` service, runs `paretune db upgrade` once before they start.
FROM runtime AS control-plane
COPY --from=service-venv /opt/paretune /opt/paretune
ENV PARETUNE_MIGRATE_ON_START=false
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["paretune", "serve", "--host", "0.0.0.0", "--port", "8000"]
