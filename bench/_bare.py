"""The bare limit: one plain JAX process (no notebook, no ipyparallel); import, initialise, one psum.

Run N copies at once: ``python bench/_bare.py PROCESS_ID N PORT [--wait-port]``.
With ``--wait-port``, processes > 0 connect only once process 0's coordinator
listens, so none waits out JAX's connect back-off (as jaxnb's engines do).
"""

import socket
import sys
import time

process_id, n, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

jax.config.update("jax_enable_preemption_service", False)
if n > 1:
    # What jaxnb's engines do (jaxnb._engine.group.process._wait_for_coordinator), written out
    # here because importing jaxnb would add its import time to the bare limit.
    while process_id > 0 and "--wait-port" in sys.argv:
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=1.0).close()
            break
        except OSError:
            time.sleep(0.01)
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=n,
        process_id=process_id,
        coordinator_bind_address=f"127.0.0.1:{port}",
    )
total = multihost_utils.process_allgather(jnp.ones(1)).sum()
assert int(total) == n
