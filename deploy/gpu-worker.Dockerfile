# syntax=docker/dockerfile:1
# The GPU worker: one agent per GPU, on an NVIDIA CUDA base (the devel flavour, for ptxas
# and the CUDA headers that the cuda backend's NVRTC compiles against). Built from the
# repository root:
#   docker build -f deploy/gpu-worker.Dockerfile -t paretune-gpu-worker .
# Run with the NVIDIA container runtime and exactly one GPU per container, e.g.
#   docker run --gpus '"device=0"' paretune-gpu-worker paretune worker --server URL --token-file F --pool h200
# Pick CUDA_IMAGE to match the driver of the GPU nodes (the driver must be at least as new
# as the CUDA release of the image).
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu24.04
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# The wheel is pure Python: build it on a small Python image.
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY deploy/build_hooks.py deploy/build_hooks.py
COPY migrations migrations
COPY service service
COPY workers workers
COPY wire wire
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${CUDA_IMAGE} AS gpu-worker
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv gcc libc6-dev tini \
    && rm -rf /var/lib/apt/lists/*
COPY --from=wheel /wheels /wheels
# The worker and its GPU backends (the `gpu` extra: torch, triton, cuda-core, cuda-bindings,
# nvidia-ml-py); nothing of the control plane.
RUN python3 -m venv /opt/paretune \
    && /opt/paretune/bin/pip install --no-cache-dir "$(echo /wheels/paretune-*.whl)[gpu]" \
    && rm -rf /wheels
RUN groupadd --system --gid 10001 paretune \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/paretune --create-home paretune \
    && mkdir -p /var/lib/paretune/secrets /var/lib/paretune/cache \
    && chown -R 10001:10001 /var/lib/paretune
ENV PATH=/opt/paretune/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    XDG_CACHE_HOME=/var/lib/paretune/cache
WORKDIR /var/lib/paretune
USER 10001:10001
# tini passes SIGTERM to the agent (it drains: finishes or hands back its trials) and reaps
# the trial sandboxes' orphans.
ENTRYPOINT ["tini", "--"]
CMD ["paretune", "worker", "--help"]
