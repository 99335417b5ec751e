"""The workers of a TPU VM slice, found the way JAX finds them.

``TPU_WORKER_HOSTNAMES`` (comma-separated, in worker order) when set, else the
GCE metadata server's ``worker-network-endpoints`` (hostnames, or the older
``name:id:ip`` triples). This worker's index is ``TPU_WORKER_ID``, else the
metadata's ``agent-worker-number``, else the entry that is one of this
machine's own addresses.
"""

from __future__ import annotations

import dataclasses
import os
import urllib.request

METADATA_URL = "http://metadata.google.internal/computeMetadata/v1/instance/attributes/"
METADATA_TIMEOUT_SECONDS = 2.0


class SliceError(RuntimeError):
    """The slice's workers could not be found; the message says what to pass instead."""


@dataclasses.dataclass(frozen=True)
class Slice:
    """The slice's workers in worker order, and which one this machine is."""

    workers: tuple[str, ...]
    this: int

    @property
    def others(self) -> tuple[str, ...]:
        return tuple(w for i, w in enumerate(self.workers) if i != self.this)


def parse_endpoints(text: str) -> tuple[str, ...]:
    """``worker-network-endpoints``: ``host,host`` or ``name:id:ip,...`` → the addresses."""
    workers = []
    for worker in (w.strip() for w in text.split(",")):
        if not worker:
            continue
        parts = worker.split(":")
        if len(parts) == 1:
            workers.append(parts[0])
        elif len(parts) == 3:
            workers.append(parts[2])
        else:
            raise SliceError(f"unsupported worker-network-endpoints entry {worker!r}; pass --hosts")
    return tuple(workers)


def metadata(key: str) -> str | None:
    """A TPU VM instance attribute from the GCE metadata server (``None`` off GCE)."""
    request = urllib.request.Request(METADATA_URL + key, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=METADATA_TIMEOUT_SECONDS) as reply:
            return reply.read().decode()
    except OSError:
        return None


def discover(env: dict[str, str] | None = None, ask_metadata: bool = True) -> Slice | None:
    """This slice's workers, or ``None`` when this machine is not a multi-worker TPU VM slice."""
    env = dict(os.environ) if env is None else env
    names = env.get("TPU_WORKER_HOSTNAMES")
    if names is not None:
        workers = tuple(w.strip() for w in names.split(",") if w.strip())
    else:
        endpoints = metadata("worker-network-endpoints") if ask_metadata else None
        workers = parse_endpoints(endpoints) if endpoints else ()
    if len(workers) < 2:
        return None
    from jaxnb._core.host_entries import is_host

    bad = next((w for w in workers if not is_host(w)), None)
    if bad is not None:
        where = "TPU_WORKER_HOSTNAMES" if names is not None else "the TPU metadata's worker-network-endpoints"
        raise SliceError(f"{where} names {bad[:80]!r}, which is not a host name or an IP address; "
                         "fix it or pass --hosts")
    return Slice(workers, this_worker(workers, env, ask_metadata))


def this_worker(workers: tuple[str, ...], env: dict[str, str], ask_metadata: bool = True) -> int:
    """This machine's index among ``workers``."""
    text = env.get("TPU_WORKER_ID")
    if text is None and ask_metadata and "TPU_WORKER_HOSTNAMES" not in env:
        text = metadata("agent-worker-number")
    if text is not None:
        if not text.strip().isdigit() or int(text) >= len(workers):
            raise SliceError(f"TPU_WORKER_ID={text!r} is not one of 0..{len(workers) - 1}; fix it")
        return int(text)
    from jaxnb._core.host_entries import HostError, route_address

    for index, worker in enumerate(workers):
        try:
            if route_address(worker) == worker:  # one of this machine's own addresses
                return index
        except HostError:
            continue
    raise SliceError(
        "cannot tell which TPU worker this machine is; set TPU_WORKER_ID or pass --hosts"
    )
