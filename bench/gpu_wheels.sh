#!/usr/bin/env bash
# The wheels bench/gpu_check.py needs on a lent GPU machine whose image lacks them.
#
# The H200 image (Python 3.12, JAX 0.11 with CUDA 13, Flax, Optax, Orbax, psutil, matplotlib...)
# has no ipyparallel, IPython, ipykernel, ipywidgets, Grain or Optuna. This downloads them and
# whatever they need that the image lacks, as x86-64 wheels for CPython 3.12, into a folder that
# git ignores and the device run carries:
#
#   bash bench/gpu_wheels.sh            # into .whl/ (ignored: .gitignore)
#   bash bench/gpu_wheels.sh .whl --tests   # and what the engine tests need (pytest, ...)
#   # then, on the device machine (carry: [".whl"]):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
#   python3 -m bench.gpu_check
#
# Wheels of packages the image already has are removed (two versions of one package stop the
# install), so the folder stays far under the 64 MiB a run may carry.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl}
PY=${PYTHON:-python3}
PYVER=${GPU_PYTHON_VERSION:-3.12}
mkdir -p "$DEST"
git check-ignore -q "$DEST/x.whl" || echo "note: $DEST/ is not ignored by git; add it to .git/info/exclude"

# What jaxnb needs beyond the image (pyproject.toml's dependencies; jax, numpy, orbax,
# matplotlib, psutil, cloudpickle and filelock are there).
NEEDED=(ipyparallel ipython ipykernel ipywidgets nbformat grain optuna)
# With --tests: what the engine and kernel tests need too (pytest, its plugins, jupyter_client).
if [[ ${2:-} == --tests ]]; then NEEDED+=(pytest pytest-timeout pytest-xdist jupyter-client); fi
PLATFORMS=()
for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
           manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64; do
  PLATFORMS+=(--platform "$tag")
done
"$PY" -m pip download --quiet --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLATFORMS[@]}" -d "$DEST" "${NEEDED[@]}"

# The image's own packages (as read from the machine, 2026-11): their wheels are not carried.
IMAGE="absl-py attrs certifi charset-normalizer chex click cloudpickle colorama contourpy cycler
etils filelock flatbuffers flax fonttools fsspec grpcio h5py humanize idna jax jaxlib jinja2
jax-cuda13-pjrt jax-cuda13-plugin kiwisolver markdown-it-py markupsafe matplotlib mdurl ml-dtypes
msgpack numpy opt-einsum optax orbax-checkpoint packaging pandas pillow protobuf psutil pygments
pyparsing python-dateutil pyyaml requests rich scipy simplejson six tensorstore toolz tqdm
treescope typing-extensions urllib3 wrapt zipp setuptools pip wheel typing-inspect"
for wheel in "$DEST"/*.whl; do
  name=$(basename "$wheel" | cut -d- -f1 | tr 'A-Z_' 'a-z-')
  for have in $IMAGE; do
    if [[ $name == "$have" ]]; then rm -f "$wheel"; fi
  done
done
echo "wheels for the GPU machine in $DEST/ ($(du -sh "$DEST" | cut -f1)):"
ls "$DEST"
