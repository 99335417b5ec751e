"""Engine side of ``%jax_cluster reset``: check that the processes agree; re-join the group.

:func:`check` runs one all-reduce and one all-gather over every device, each
carrying ``(tag, counter)`` from every process. If a process still has a stale
collective in flight (after an interrupt), the check pairs with it and some
process sees another tag, or the check fails or hangs: the notebook then resets.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from jaxnb._core.contract import JoinParams
from jaxnb._engine import jax_internals
from jaxnb._engine.group import process

#: Checks passed since this process (re)joined the group.
_passed = 0


def check(tag: int) -> dict[str, Any]:
    """Every process's ``(tag, counter)`` as seen through an all-reduce and an all-gather."""
    global _passed
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n, me = jax.process_count(), jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("jaxnb_check",))
    local = np.zeros((jax.local_device_count(), n, 2), np.int32)
    local[0, me] = (tag, _passed)
    x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("jaxnb_check")), local)
    replicated = NamedSharding(mesh, P())
    summed = jax.jit(_total, out_shardings=replicated)(x)
    gathered = jax.jit(_same, out_shardings=replicated)(x)
    result = {
        "reduced": np.asarray(summed).tolist(),
        "gathered": np.asarray(gathered).sum(axis=0).tolist(),
        "counter": _passed,
    }
    _passed += 1
    return result


def _total(x: Any) -> Any:
    return x.sum(axis=0)


def _same(x: Any) -> Any:
    return x


def made_before(names: list[str] | None = None) -> list[str]:
    """The user's variables (those of ``names``, else all) that hold a ``jax.Array``, a mesh or
    a sharding (or a list, tuple or dict of them) of the devices before the last
    :func:`reinitialize`: their collectives go to the old group, whose connections are closed."""
    import jax

    from jaxnb._engine.run.values import user_namespace

    current = set(jax.devices())
    namespace = user_namespace()
    chosen = names if names is not None else [n for n in namespace if not n.startswith("_")]
    return [name for name in chosen if name in namespace and _of_old_devices(namespace[name], current)]


def _of_old_devices(value: Any, current: set, depth: int = 0) -> bool:
    """Whether ``value`` (or, in a container, one of its first items) lives on devices not in
    ``current``."""
    import jax

    devices: Any = ()
    with contextlib.suppress(Exception):  # a deleted array, an object that only looks alike
        if isinstance(value, jax.Array):
            devices = value.devices()
        elif isinstance(value, jax.sharding.Mesh):
            devices = value.devices.flat
        elif isinstance(value, jax.sharding.Sharding):
            devices = value.device_set
        elif isinstance(value, (list, tuple, dict)) and depth < 3:
            items = list(value.values() if isinstance(value, dict) else value)[:100]
            return any(_of_old_devices(item, current, depth + 1) for item in items)
    return any(d not in current for d in devices)


def reinitialize(params: JoinParams) -> float:
    """Leave the group, drop JAX's backends, join a new group at ``params.coordinator``;
    seconds taken.

    Python state is kept. JAX objects made before (meshes, arrays) still belong
    to the old backend and must be made again.
    """
    global _passed
    import jax
    import jax.extend

    start = time.monotonic()
    with contextlib.suppress(Exception):  # a broken group may not shut down cleanly
        jax.distributed.shutdown()
    jax.extend.backend.clear_backends()
    jax_internals.forget_meshes()  # a jit under an old mesh would refuse the new devices
    os.environ["JAX_COORDINATOR_ADDRESS"] = params.coordinator
    process.join_group(params)
    jax.devices()  # create the new backend now, not in the user's next cell
    _passed = 0
    return time.monotonic() - start
