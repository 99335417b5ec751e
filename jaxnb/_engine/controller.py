"""Entry point of the controller: the kernel-death watchdog, then ipyparallel's controller.

Launched as ``python -m jaxnb._engine.controller [ipcontroller arguments]`` for
local clusters, so the controller and its scheduler processes exit when the
notebook kernel dies, even if no engine is left to stop them.
"""

from __future__ import annotations


def main() -> None:
    """Start the watchdog, then hand over to ``ipyparallel.controller``."""
    from jaxnb._engine import watchdog

    watchdog.start_for_controller()
    from ipyparallel.controller.app import main as ipcontroller_main

    ipcontroller_main()


if __name__ == "__main__":
    main()
