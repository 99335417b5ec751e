"""Entry point of a jaxnb engine: arm the safety nets, import JAX, run ipyparallel's engine.

Launched by ipyparallel's launchers (local, ssh, mpi, slurm, ...) as ``python -c "import gc;
gc.disable(); from jaxnb._engine.boot.main import main; main()" [ipengine arguments]``
(locally through :func:`jaxnb._lifecycle.launch.python_cmd`), so the environment jaxnb
sets on the launcher is in place before JAX is imported.
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    """Prepare this process, then hand over to ``ipyparallel.engine``."""
    from jaxnb._engine.boot import bars, enter_workdir, stack_dumps, stderr_tee, watchdog

    enter_workdir.enter()  # --workdir: before ipyparallel takes the working folder
    bars.install()
    stack_dumps.arm()
    watchdog.start_from_env()
    # Engines take no debugger requests: keep ipykernel from loading debugpy (~50 ms).
    sys.modules.setdefault("debugpy", None)  # type: ignore[arg-type]
    # JAX's preemption service is off through JAX_ENABLE_PREEMPTION_SERVICE (set at launch).
    import jax  # noqa: F401 - before registering: the first cell does not pay for it

    from jaxnb._core.ipykernel_internals import tee_out_stream
    from jaxnb._core.optional import optional
    from jaxnb._engine.compile import cache

    with optional("compile cache"):  # an optional feature never stops an engine from starting
        cache.enable_from_env()  # before anything compiles
    from jaxnb._engine.boot import warm

    warm.from_env()  # a spare: what the group's engines imported, before it registers
    from ipyparallel.engine.app import main as ipengine_main

    gc.freeze()  # what was imported stays: later collections need not scan it
    gc.enable()  # off while importing, when started by jaxnb._lifecycle.launch.python_cmd
    # fd 2: logged first
    ipengine_main(out_stream_factory=tee_out_stream(stderr_tee.start, stderr_tee.forward))


if __name__ == "__main__":
    main()
