"""Send report records to the notebook in batches, from a background thread.

Records go over ipyparallel's data publication channel (the engine's IOPub),
each batch under a new key ``jaxnb/<n>`` because the client's ``ar.data``
keeps only the last value of a key. JAX scalars are copied to the host and
converted to Python numbers here, off the training loop, so ``report()`` never
waits on a device-to-host copy; ``report()`` only appends its record to a deque
(no lock: ``append`` and ``popleft`` are atomic), this thread takes them out in order.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from jaxnb._core.contract import MONITOR_KEY
from jaxnb._core.contract import REPORT_KEY as KEY

#: How often the flusher thread sends what has been reported (seconds).
FLUSH_SECONDS = 0.02

Send = Callable[[dict[str, Any]], None]


def datapub_sender() -> Send:
    """A ``send(data)`` that publishes on this engine's IOPub, tagged with the current request.

    The request's parent header is captured now, so sends from other threads
    still reach the ``AsyncResult`` of the request that is running.
    """
    from ipyparallel.serialize import serialize_object
    from IPython import get_ipython

    shell = get_ipython()
    pub = getattr(shell, "data_pub", None)
    if pub is None or pub.session is None:
        raise RuntimeError("jaxnb training runs only inside an ipyparallel engine")
    session, socket, topic = pub.session, pub.pub_socket, pub.topic
    parent = dict(pub.parent_header)

    def send(data: dict[str, Any]) -> None:
        buffers = serialize_object(
            data, buffer_threshold=session.buffer_threshold, item_threshold=session.item_threshold
        )
        session.send(socket, "data_message", content={"keys": list(data)}, parent=parent,
                     buffers=buffers, ident=topic)

    return send


class BatchPublisher:
    """Collects records and publishes them in order, every :data:`FLUSH_SECONDS`; with a
    ``monitor``, also what it says every ``monitor_every`` seconds and at the end."""

    def __init__(self, send: Send, interval: float = FLUSH_SECONDS,
                 monitor: Callable[[], dict[str, Any]] | None = None, monitor_every: float = 1.0,
                 journal: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        """``journal``: also given each batch, on this thread, once on the host (process 0's
        run-folder record, :mod:`jaxnb._engine.run.journal`)."""
        self._send = send
        self._journal = journal
        self._interval = interval
        self._monitor, self._monitor_every = monitor, monitor_every
        self._monitored = time.monotonic()
        self._pending: deque[dict[str, Any]] = deque()
        self._send_lock = threading.Lock()  # one batch at a time, in order
        self._wake = threading.Event()
        self._closed = False
        self.batches = 0
        self._thread = threading.Thread(target=self._loop, name="jaxnb-reports", daemon=True)
        self._thread.start()

    def add(self, record: dict[str, Any], now: bool = False) -> None:
        """Queue one record (cheap; never blocks on the device, nor on this thread); ``now``
        wakes the thread to send it without waiting for the next flush."""
        self._pending.append(record)
        if now:
            self._wake.set()

    def flush(self, final: bool = False) -> None:
        """Convert and publish everything queued so far, as one batch (with the monitor's
        sample when one is due, or ``final``)."""
        with self._send_lock:
            pending = self._pending
            batch = [pending.popleft() for _ in range(len(pending))]  # only this thread takes
            data: dict[str, Any] = {}
            due = final or time.monotonic() - self._monitored >= self._monitor_every
            if self._monitor is not None and due:
                self._monitored = time.monotonic()
                try:
                    data[MONITOR_KEY] = self._monitor()
                except Exception as exc:  # a reading that fails must not stop the reports
                    print(f"jaxnb: could not read this process's memory and time: {exc}", file=sys.stderr)
            if not batch:
                if data:
                    self._send(data)
                return
            _to_host(batch)
            if self._journal is not None:
                try:
                    self._journal(batch)
                except Exception as exc:  # the notebook still gets them
                    print(f"jaxnb: could not write reports to the run folder: {exc}", file=sys.stderr)
            data[f"{KEY}{self.batches}"] = batch
            try:
                self._send(data)
            except Exception:  # an odd metric value must not lose the batch
                for record in batch:
                    record["metrics"] = {k: _safe(v) for k, v in record["metrics"].items()}
                self._send(data)
            self.batches += 1

    def close(self) -> None:
        """Stop the thread and publish the final batch (call before the run returns)."""
        self._closed = True
        self._wake.set()
        self._thread.join()
        self.flush(final=True)

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()  # a record added from here on is in this flush, or wakes the next
            if self._closed:
                return
            try:
                self.flush()
            except Exception as exc:  # keep flushing; the final flush raises
                print(f"jaxnb: could not publish reports: {exc}", file=sys.stderr)


def host_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` on the host, as JSON (array values as numbers or lists, the rest as text)."""
    record = {"metrics": dict(metrics)}
    _to_host([record])
    return json.loads(json.dumps(record["metrics"], default=repr))


def _to_host(batch: list[dict[str, Any]]) -> None:
    """Give each record new metrics: array values (JAX or NumPy) as Python numbers or lists.

    The old metrics dicts are left as they are (``report()`` still reads its values)."""
    jax = sys.modules.get("jax")
    array = jax.Array if jax is not None else ()
    hosts: Any = iter(())
    if jax is not None:
        arrays = [v for record in batch for v in record["metrics"].values() if isinstance(v, array)]
        if arrays:
            hosts = iter(_fetch_all(jax, arrays))
    for record in batch:
        record["metrics"] = {k: _plain(next(hosts) if isinstance(v, array) else v)
                             for k, v in record["metrics"].items()}


def _fetch_all(jax: Any, values: list[Any]) -> list[Any]:
    """The host copies of ``values``: on CPU one by one (``device_get`` of a list costs several
    times more per value there), else with ``device_get`` (the copies overlap)."""
    if jax.default_backend() != "cpu":
        try:
            return jax.device_get(values)
        except Exception:  # one failed computation: convert one by one
            return [_fetch(jax, v) for v in values]
    import numpy as np

    found = []
    for value in values:
        try:
            found.append(np.asarray(value))
        except Exception:
            found.append(_fetch(jax, value))
    return found


def _fetch(jax: Any, value: Any) -> Any:
    try:
        return jax.device_get(value)
    except Exception as exc:
        return f"<error: {type(exc).__name__}>"


def _plain(value: Any) -> Any:
    """Python scalars as they are; NumPy scalars and arrays as Python numbers or lists."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "dtype") and hasattr(value, "tolist"):
        return value.item() if getattr(value, "size", 0) == 1 else value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _safe(value: Any) -> Any:
    """A picklable stand-in for ``value``."""
    import pickle

    try:
        pickle.dumps(value)
    except Exception:
        return repr(value)
    return value
