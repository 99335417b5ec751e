"""How the benches that train ``bench/_mlp.py``'s MLP set jaxnb's engines up (no JAX imported
here): the engines find ``bench`` on their path, and the setup cell a recovery replays."""

from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Engines (and Ray's workers, and the lab hosts' engines) import bench._mlp from here.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)

#: Devices per process (simulated on CPU): the issue's 2 processes × 2 devices.
DEVICES = 2
#: The user's setup, replayed by a recovery: Flax and Optax, and the model's code.
SETUP_CELL = ("import jax, jax.numpy as jnp, numpy as np, optax\nfrom flax import nnx\n"
              "from bench import _mlp\nready = True")
