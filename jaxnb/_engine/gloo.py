"""Give JAX's gloo CPU collectives this host's routable address.

By default gloo finds its own address by resolving the machine's hostname,
which on many hosts maps to 127.0.0.1 (or does not resolve at all); peers on
other hosts are then told to connect to their own loopback. JAX's
``make_gloo_tcp_collectives(..., hostname=...)`` is the knob: this module (the
only one in jaxnb that reaches into JAX's CPU client set-up) registers a CPU
backend factory that passes it.
"""

from __future__ import annotations

import contextlib
from typing import Any


def use_address(address: str) -> None:
    """Make the CPU backend (created later, after ``jax.distributed.initialize``) use ``address``.

    No effect once the CPU backend exists; it is created again after
    ``jax.extend.backend.clear_backends()`` (what a repair does) with the same address.
    """
    from jax._src import config, distributed, xla_bridge
    from jax._src.lib import _jax

    def make_cpu_client() -> Any:
        client = distributed.global_state.client
        collectives = None
        if client is not None and config.cpu_collectives_implementation.value == "gloo":
            collectives = _jax.make_gloo_tcp_collectives(distributed_client=client, hostname=address)
        return xla_bridge.make_cpu_client(collectives)

    # "Backend cpu already initialized": it keeps the address it was made with.
    with contextlib.suppress(RuntimeError):
        xla_bridge.register_backend_factory("cpu", make_cpu_client, priority=0, fail_quietly=False)
