"""``%jax_pull NAME …`` and ``%jax_push NAME …``: values between the notebook and the engines."""

from __future__ import annotations

from IPython.core.error import UsageError

from jaxnb.magics import accept, kit


def pull(front: kit.Front, line: str) -> None:
    """``%jax_pull NAME [NAME ...]``: set NAME in the notebook to its value on the engines.

    A global array is gathered as NumPy; other objects come from process 0.
    """
    names = accept.names(line, "%jax_pull")
    cluster = front.require()
    for name in names:
        with kit.api_call(NameError):
            front.shell.user_ns[name] = cluster.pull(name)


def push(front: kit.Front, line: str) -> None:
    """``%jax_push NAME [NAME ...]``: send notebook variables to every process."""
    names = accept.names(line, "%jax_push")
    cluster = front.require()
    missing = [n for n in names if n not in front.shell.user_ns]
    if missing:
        raise UsageError(f"name {missing[0]!r} is not defined in the notebook; define it first")
    with kit.api_call():
        cluster.push(**{n: front.shell.user_ns[n] for n in names})
