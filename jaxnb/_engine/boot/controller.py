"""Entry point of the controller: the kernel-death watchdog, then ipyparallel's controller.

Launched through :func:`jaxnb._lifecycle.launch.python_cmd` with ipcontroller's arguments,
so the controller and its scheduler processes exit when the notebook kernel dies,
even if no engine is left to stop them.
"""

from __future__ import annotations

import gc


def main() -> None:
    """Start the watchdog, then hand over to ``ipyparallel.controller``."""
    from jaxnb._engine.boot import watchdog

    watchdog.start_for_controller()
    from ipyparallel.controller.app import main as ipcontroller_main

    gc.freeze()  # what was imported stays: later collections need not scan it
    gc.enable()  # off while importing, when started by jaxnb._lifecycle.launch.python_cmd
    ipcontroller_main()


if __name__ == "__main__":
    main()
