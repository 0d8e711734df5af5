#!/usr/bin/env bash
# Download, into .whl/, the cp312 manylinux wheels that the GPU machine's image lacks for
# running the service and the worker from this repository (its image has torch, triton,
# cuda-core, nvidia-ml-py, numpy, httpx, typer, rich, pyyaml, anyio, click, h11, tqdm,
# markupsafe, prometheus-client, annotated-doc; not these; psycopg and redis only because
# `paretune serve` checks that the service extras are all installed). Versions are pinned to the
# development environment's (.venv) so both run the same code.
#
#   bench/gpu/fetch_wheels.sh            # then carry .whl to the GPU machine and run
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PIP="${PIP:-.venv/bin/pip}"
PACKAGES=(
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing-extensions==4.16.0
  fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0
  sqlalchemy==2.1.9 greenlet==3.5.6 alembic==1.20.1 mako==1.4.3
  optuna==5.0.0 colorlog==6.12.0 opentelemetry-api==1.45.2
  cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
  psycopg==3.3.9 psycopg-binary==3.3.9 redis==8.1.0
  pydantic-settings==2.16.3 python-dotenv==1.2.4 cachetools==8.0.2 moocore==0.3.2 platformdirs==4.14.9
  importlib-metadata==10.2.0
)
# Liger-Kernel for bench/gpu/liger.py (pure Triton; torch and Triton are the image's):
#   pip download --no-deps liger-kernel==0.8.5 -d .whl
mkdir -p .whl
for package in "${PACKAGES[@]}"; do
  "$PIP" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any -d .whl "$package"
done
ls -la .whl
du -sh .whl
