"""``%jax_train --attach --name RUN`` and ``%jax_tune --attach --name STUDY``: follow a run or
search going on on an attached named cluster (its live dashboard or view, every report since it
began) until it ends, and store its result (``JaxCluster.result``)."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError

from jaxnb.magics import kit


def follow(front: kit.Front, args: Any, store: Any, starting: list[str], magic: str,
           what: str) -> Any:
    """Follow ``args.name`` (a ``what``: "RUN" or "STUDY"); ``starting``: the flags given that
    only start one (refused)."""
    if args.func is not None or args.name is None:
        raise UsageError(f"%{magic} --attach takes no FUNC, only --name {what} (the one to "
                         f"follow): %{magic} --attach --name {what}")
    if starting:
        raise UsageError(f"--{starting[0].replace('_', '-')} starts one; %{magic} --attach only "
                         "follows one: drop it")
    cluster = front.require()
    with kit.api_call():
        result = cluster.result(args.name, storage=args.storage, show=True)
    try:
        result.wait()
    except KeyboardInterrupt:  # stop following; it goes on
        kind = "run" if what == "RUN" else "search"
        stop = ("its dashboard's Stop" if what == "RUN"
                else f"`jaxnb.current_cluster().result({args.name!r}).stop()`")
        print(f"jaxnb: stopped following {kind} {args.name!r}; it goes on (follow it again with "
              f"%{magic} --attach --name {args.name}; {stop} ends it)")
    store(result)
    said = getattr(result, "error", None) or getattr(result, "stopped_because", None)
    if said:
        print(f"jaxnb: {said}", file=sys.stderr)
    return result
