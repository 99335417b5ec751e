"""The kernel's side of a named cluster: start its supervisor, record what another kernel needs
to attach, attach (take over), detach, and notice that another kernel took it over."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from jaxnb._attach import record
from jaxnb._core import cluster_names as names
from jaxnb._core.errors import ClusterStateError

#: How long a stop waits for the supervisor to end everything.
STOP_SECONDS = 15.0
#: How long an attach waits for a restart by the supervisor (a run's recovery) to be recorded.
RESTART_SECONDS = 180.0
#: After an attach, how long reading ipyparallel's cluster file waits unless it is needed
#: sooner: it takes about a second of CPU, which would slow the attach's own cell.
LOAD_AFTER_SECONDS = 3.0

RUNS_ALREADY = ("a cluster named {name!r} runs already on this machine; attach it with "
                "`%jax_cluster attach {name}` or stop it with `python -m jaxnb stop {name}`")
NONE_NAMED = ("no cluster named {name!r} runs on this machine; `%jax_cluster list` shows those "
              "that do, `%jax_cluster start --name {name}` starts one")
TAKEN_OVER = ("cluster {name!r} was taken over by another kernel (pid {pid}) at {when}; this "
              "kernel let it go: `%jax_cluster attach {name}` takes it back")


@dataclasses.dataclass
class Attachment:
    """This kernel's hold on named cluster ``name``."""

    name: str
    idle_timeout: float | None
    supervisor: dict[str, Any]
    token: str = dataclasses.field(default_factory=lambda: secrets.token_hex(8))
    process: subprocess.Popen | None = None  # the supervisor, when this kernel started it
    #: Reading ipyparallel's cluster file after an attach (about a second, off the attach's path).
    loading: threading.Thread | None = None
    #: The supervisor's own hold, to drive a run on (:mod:`jaxnb._cluster_driving`): it never
    #: takes the cluster over, and its records leave the attached kernel as they find it.
    headless: bool = False
    #: Set when the cluster file is needed now (:meth:`loaded`): the reading starts at once.
    wanted: threading.Event = dataclasses.field(default_factory=threading.Event)

    def loaded(self, seconds: float = 60.0) -> None:
        """Wait until the cluster file read after an attach is in (``group.ipp``)."""
        self.wanted.set()
        if self.loading is not None:
            self.loading.join(seconds)

    def load_later(self, load: Any) -> None:
        """Call ``load()`` in a thread, :data:`LOAD_AFTER_SECONDS` from now or once wanted."""
        def later() -> None:
            self.wanted.wait(LOAD_AFTER_SECONDS)
            load()

        self.loading = threading.Thread(target=later, name="jaxnb-attach", daemon=True)
        self.loading.start()

    def taken_over(self) -> str | None:
        """One line when another kernel attached since (or the cluster is gone), else ``None``."""
        doc = None if self.headless else record.read(names.record_path(self.name))
        if doc is None:
            return None
        kernel = doc.get("kernel") or {}
        if kernel.get("token") in (None, self.token):
            return None
        return TAKEN_OVER.format(name=self.name, pid=kernel.get("pid"),
                                 when=time.strftime("%H:%M:%S", time.localtime(kernel.get("since", 0))))


def supervisor_of(name: str) -> dict[str, Any] | None:
    """The running supervisor of ``name`` (its process entry), or ``None``."""
    doc = record.read(names.supervisor_path(name))
    entry = (doc or {}).get("supervisor")
    return entry if record.alive(entry) else None


def launch(name: str, idle_timeout: float | None) -> Attachment:
    """Start the supervisor of a new cluster ``name`` (a ``ClusterStateError`` when one runs)."""
    if supervisor_of(name) is not None:
        raise ClusterStateError(RUNS_ALREADY.format(name=name))
    record.remove(names.record_path(name))  # left by a supervisor that was SIGKILLed
    me = record.me()
    code = "import gc; gc.disable(); from jaxnb._cluster_driving import main; gc.enable(); main()"
    args = [sys.executable, "-c", code, name, "none" if idle_timeout is None else repr(idle_timeout),
            str(me["pid"]), repr(me["created"])]
    fd = os.open(names.log_path(name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd,
                                   start_new_session=True, close_fds=True)
    finally:
        os.close(fd)
    return Attachment(name, idle_timeout, record.process_entry(process.pid), process=process)


def watch_pid(attachment: Attachment) -> int:
    """The pid the engines' and controller's watchdogs watch."""
    return int(attachment.supervisor["pid"])


def save(attachment: Attachment, doc: dict[str, Any]) -> None:
    """Record ``doc`` (what attaching needs) with this kernel attached."""
    path = names.record_path(attachment.name)
    if attachment.headless:  # the kernel attached (or none) stays so
        now = record.read(path) or {}
        held = {"kernel": now.get("kernel"), "detached_at": now.get("detached_at")}
    else:
        held = {"kernel": dict(record.me(), token=attachment.token, since=time.time()),
                "detached_at": None}
    doc = dict(doc, name=attachment.name, supervisor=attachment.supervisor,
               idle_timeout=attachment.idle_timeout, **held)
    record.write(path, doc)


def take_over(name: str) -> tuple[Attachment, dict[str, Any]]:
    """Attach this kernel to cluster ``name``: the record, now naming this kernel (once a
    restart its supervisor makes, driving a run on, has recorded the new engines)."""
    names.check(name)
    entry = supervisor_of(name)
    doc = record.read(names.record_path(name))
    deadline = time.monotonic() + RESTART_SECONDS
    while doc is not None and doc.get("restarting") and time.monotonic() < deadline and record.alive(entry):
        time.sleep(0.2)
        doc = record.read(names.record_path(name))
    if entry is None or doc is None:
        raise ClusterStateError(NONE_NAMED.format(name=name))
    attachment = Attachment(name, doc.get("idle_timeout"), entry)
    save(attachment, doc)
    return attachment, doc


def detach(attachment: Attachment) -> None:
    """Leave the cluster running, with no kernel attached (its idle time starts now)."""
    path = names.record_path(attachment.name)
    doc = record.read(path)
    if doc is not None and attachment.taken_over() is None:
        record.write(path, dict(doc, kernel=None, detached_at=time.time()))


def update(attachment: Attachment, **fields: Any) -> None:
    """Change fields of the record (while this kernel holds it)."""
    if attachment.taken_over() is None:
        record.update(names.record_path(attachment.name), **fields)


def stop(name: str, supervisor: dict[str, Any] | None = None) -> bool:
    """Ask the supervisor of ``name`` to stop everything; wait until it did. False: none ran."""
    proc = record.process_of(supervisor if supervisor is not None else supervisor_of(name))
    if proc is None:
        record.remove(names.record_path(name), names.supervisor_path(name))
        return False
    with_pids = [record.process_of(p) for p in (record.read(names.record_path(name)) or {}).get("pids", [])]
    os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    import psutil

    left = [p for p in [proc, *with_pids] if p is not None]
    _, alive = psutil.wait_procs(left, timeout=max(0.0, deadline - time.monotonic()))
    for p in alive:  # it did not manage: nothing may be left
        with contextlib.suppress(psutil.Error):
            p.kill()
    return True
