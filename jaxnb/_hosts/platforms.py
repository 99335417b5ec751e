"""Is the platform asked for there? Checked on this machine before anything starts.

``--platform gpu`` needs a CUDA build of JAX and a GPU; ``--platform tpu``
without ``--hosts`` needs this machine to be a TPU VM. Without them JAX would
fall back to the CPU (or fail deep inside ``jax.distributed``), so jaxnb says
so in one line instead. Nothing here imports JAX.
"""

from __future__ import annotations

import glob
import importlib.metadata
import os

from jaxnb._core.spelling import example

#: Distributions that give JAX its CUDA backend (the ``jax[cuda12]`` / ``jax[cuda13]`` extras).
CUDA_PLUGINS = ("jax-cuda12-plugin", "jax-cuda13-plugin", "jax-cuda12-pjrt", "jax-cuda13-pjrt")
NO_CUDA_JAX = (
    "{asked}: this notebook's JAX has no CUDA support (no jax-cuda12-plugin installed); "
    'install it with `pip install -U "jax[cuda12]"`, or use {cpu}'
)
NO_GPU = "{asked}: no NVIDIA GPU found on this machine (nvidia-smi lists none); use {cpu}"
NO_TPU = (
    "{asked}: this machine is not a TPU VM (no TPU_WORKER_HOSTNAMES, no TPU under /dev); "
    "run the notebook on a TPU VM worker, or use {cpu}"
)


def cuda_jax_installed() -> bool:
    """Whether JAX's CUDA plugin is installed in this Python (looked up, not imported)."""
    for name in CUDA_PLUGINS:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return True
    return False


def local_tpu() -> bool:
    """Whether this machine has TPU chips (``/dev/accel*`` or ``/dev/vfio``) or says it is a TPU VM."""
    if os.environ.get("TPU_WORKER_HOSTNAMES") or os.environ.get("TPU_ACCELERATOR_TYPE"):
        return True
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def check_local(platform: str, gpu_count: int | None = None) -> str | None:
    """The one-line reason local engines cannot run on ``platform`` here, or ``None``."""
    if platform == "gpu":
        if not cuda_jax_installed():
            return _say(NO_CUDA_JAX, platform)
        if gpu_count == 0:
            return _say(NO_GPU, platform)
    if platform == "tpu" and not local_tpu():
        return _say(NO_TPU, platform)
    return None


def _say(message: str, platform: str) -> str:
    """``message`` naming the option as the caller spells it (``platform='gpu'``, ``--platform gpu``)."""
    return message.format(asked=example("platform", platform), cpu=example("platform", "cpu"))
