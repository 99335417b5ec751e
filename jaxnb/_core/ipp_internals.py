"""ipyparallel's internals that jaxnb reads, in one place (written against ipyparallel 9.2).

jaxnb drives ipyparallel through its public API (and extends its ssh launcher in
:mod:`jaxnb._hosts.ssh`), except for these few reads of its objects' insides:
the per-engine futures of an ``AsyncResult``, the
launchers of an engine set and their processes and log files, the
controller's process, and the controller's connection files. If an
ipyparallel release moves one of them, this is the module to change.
"""

from __future__ import annotations

import os
from typing import Any

import psutil

#: The ipyparallel version these reads were written against.
WRITTEN_FOR = "9.2"


class Reply:
    """One engine's part of a multi-engine ``AsyncResult``, through ipyparallel's public API.

    Its ``metadata`` (stdout, stderr, outputs, data, error: filled in as the engine's messages
    arrive) is the ``AsyncResult``'s ``metadata[index]``. Whether it is done and its value come
    from ``Client.get_result(msg_id, block=False, owner=False)``, an ``AsyncResult`` of that one
    request, taken while the request runs (ipyparallel forgets a request's local caches as soon
    as its own reply is in, so ``Client.results`` will not do); once the whole result is in,
    from ``AsyncResult.get(return_exceptions=True)``.
    """

    def __init__(self, client: Any, ar: Any, index: int) -> None:
        self.ar, self.index = ar, index
        self.msg_id = ar.msg_ids[index]
        metadata = ar.metadata
        self.metadata: dict[str, Any] = metadata[index] if isinstance(metadata, list) else metadata
        # Finished already: the whole result answers. (A request that ends between the two
        # looks is answered by the controller's records instead, as get_result does then.)
        self.part = None if ar.ready() else _part(client, self.msg_id)

    def done(self) -> bool:
        """Whether the engine's reply has arrived."""
        if self.part is None or self.ar.ready():
            return True
        try:
            return bool(self.part.ready())
        except Exception:  # a record the controller answered with an error: done
            return True

    def result(self, timeout: float | None = None) -> Any:
        """The reply's value; a remote error is the value (as ipyparallel's own futures give
        it). Raises ``TimeoutError`` when it has not come within ``timeout`` seconds."""
        if self.part is None or self.ar.ready():
            return self.ar.get(return_exceptions=True)[self.index]
        try:
            self.part.wait(timeout)
        except Exception as exc:  # the controller's record of a failed request raises here
            return exc
        if not self.part.ready():
            raise TimeoutError(f"no reply to {self.msg_id} within {timeout:g} s")
        try:
            return self.part.get(0)
        except Exception as exc:  # ipyparallel raises a remote error: here it is the value
            return exc


def _part(client: Any, msg_id: str) -> Any:
    """``Client.get_result`` of one request; asked again when the request ended while it was
    being asked (ipyparallel then raises ``KeyError``: its caches went in between), which
    answers from the controller's records."""
    try:
        return client.get_result(msg_id, block=False, owner=False)
    except KeyError:
        return client.get_result(msg_id, block=False, owner=False)


def futures(ar: Any, client: Any) -> list[Reply]:
    """One :class:`Reply` per engine of an ``AsyncResult`` that ``client`` sent through a view
    of a list of engines (jaxnb's group view), in the view's order (``ar.msg_ids``)."""
    return [Reply(client, ar, i) for i in range(len(ar.msg_ids))]


def answers(ar: Any, client: Any) -> list[Any]:
    """Each engine's value (a remote error as the value) of an ``AsyncResult`` (waited for)."""
    if ar.ready():
        return list(ar.get(return_exceptions=True))
    return [reply.result() for reply in futures(ar, client)]


def engine_launchers(ipp_cluster: Any) -> list[Any]:
    """The launcher of every engine started by ``ipp_cluster`` (local sets: one per engine)."""
    if ipp_cluster is None:
        return []
    found: list[Any] = []
    for engine_set in ipp_cluster.engines.values():
        found.extend(getattr(engine_set, "launchers", {}).values())
    return found


def launcher_process(launcher: Any) -> psutil.Process | None:
    """The process an engine launcher started on this machine (``None`` for remote ones)."""
    return getattr(launcher, "process", None)


def stopped_engines(ipp_cluster: Any) -> list[dict[str, Any]]:
    """``{"pid": …, "exit_code": …}`` of each engine whose end ``ipp_cluster``'s engine sets
    noted (they forget its launcher then)."""
    if ipp_cluster is None:
        return []
    found: list[dict[str, Any]] = []
    for engine_set in ipp_cluster.engines.values():
        stop_data = getattr(engine_set, "stop_data", None) or {}
        found.extend(d for d in stop_data.get("engines", {}).values() if isinstance(d, dict))
    return found


def launched_engines(ipp_cluster: Any) -> dict[int, Any]:
    """pid → launcher, for every engine process ``ipp_cluster`` started on this machine."""
    found = {}
    for launcher in engine_launchers(ipp_cluster):
        process = launcher_process(launcher)
        if process is not None:
            found[process.pid] = launcher
    return found


def launcher_output(launcher: Any, start: int = 0) -> str:
    """What the process a launcher started wrote (stderr and stdout together), from byte ``start``."""
    try:
        with open(launcher.output_file, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")
    except (OSError, AttributeError):
        return launcher.get_output() or ""


def launcher_output_size(launcher: Any) -> int | None:
    """How many bytes the process a launcher started has written so far (``None``: unknown)."""
    try:
        return os.path.getsize(launcher.output_file)
    except (OSError, AttributeError, TypeError):
        return None


def controller_process(ipp_cluster: Any) -> psutil.Process | None:
    """The controller's process, when it runs on this machine."""
    controller = getattr(ipp_cluster, "controller", None)
    return getattr(controller, "process", None) if controller is not None else None


def key_files(ipp_cluster: Any) -> list[str]:
    """The controller's connection files (0600, holding the message key) and the cluster file."""
    security = os.path.join(ipp_cluster.profile_dir, "security")
    cid = ipp_cluster.cluster_id
    return [
        os.path.join(security, f"ipcontroller-{cid}-engine.json"),
        os.path.join(security, f"ipcontroller-{cid}-client.json"),
        ipp_cluster.cluster_file,
    ]


def control_apply(client: Any, engine_id: int, f: Any, *args: Any) -> Any:
    """Send ``f(*args)`` to one engine as an ipyparallel ``apply_request`` on its *control*
    channel; a future whose result is the reply message (see :func:`reply_value`).

    ipykernel serves the control channel on its own thread, so this reaches an engine whose
    main thread is busy with a cell; jaxnb's engines route the request to ipyparallel's own
    ``apply_request`` handler there (``jaxnb._engine.debug.hooks``). ipyparallel 9.2 sends
    control requests only for its fixed ones (``send_signal``, ``abort``, ``clear``), with this
    same private ``_send``.
    """
    missing = control_route_missing(client)
    if missing:
        raise RuntimeError(missing)
    from ipyparallel.serialize import pack_apply_message

    session = client.session
    buffers = pack_apply_message(f, args, {}, buffer_threshold=session.buffer_threshold,
                                 item_threshold=session.item_threshold)
    ident = client._engines[engine_id].encode()  # noqa: SLF001 - engine id -> its zmq identity
    return client._send(client._control_stream, "apply_request", buffers=buffers, ident=ident)  # noqa: SLF001


def control_route_missing(client: Any) -> str | None:
    """Why :func:`control_apply` cannot send with this ipyparallel (``None``: it can)."""
    gone = [name for name in ("_engines", "_send", "_control_stream", "session")
            if not hasattr(client, name)]
    if gone:
        return (f"this ipyparallel's Client has no {', '.join(gone)}: jaxnb cannot send on the "
                f"engines' control channel")
    return None


def reply_value(reply: dict) -> Any:
    """The value an ``apply_reply`` message carries; a remote exception is raised as ipyparallel's."""
    from ipyparallel.error import unwrap_exception
    from ipyparallel.serialize import deserialize_object

    content = reply["content"]
    if content.get("status") != "ok":
        raise unwrap_exception(content)
    return deserialize_object(reply["buffers"])[0]
