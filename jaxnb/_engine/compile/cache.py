"""JAX's persistent compilation cache on every engine (``--compile-cache DIR|off``, on by default).

Set up when the engine starts, before anything compiles (:func:`enable_from_env`):

- the folder: ``--compile-cache DIR`` (a leading ``~`` is this host's home), else the default
  on each host, ``$XDG_CACHE_HOME/jaxnb/xla`` or ``~/.cache/jaxnb/xla``: one folder on this
  machine for every local engine, each host its own; made 0700, and not used when another user
  could write it (:mod:`.cache_folder`): its executables run in the job;
- every process writes it. JAX writes entries from process 0 only, so on a host without
  process 0 nothing would ever be cached, nor would any process's own computations (their
  devices differ, so do their keys): :func:`jaxnb._engine.jax_internals.cache_from_every_process`;
- thresholds for interactive use: an executable that took :data:`MIN_COMPILE_SECONDS` (10 ms)
  to compile is kept, of any size: reading one back takes a few milliseconds, and a model's
  set-up compiles dozens of small programs (initialisers, optimizer state) of 10–150 ms each
  besides its step, which a recovery or a replay would otherwise compile again. JAX's default,
  1 s, keeps almost nothing on CPU, where even a training step compiles in tenths of a second;
  below 10 ms are the one-operation programs of eager code. The folder is bounded to
  :data:`MAX_BYTES`, least recently used entries evicted first. The bound also turns on JAX's
  file lock (``filelock``), so processes sharing the folder never read half-written entries;
- hits, lookups and the compile time they saved are counted from JAX's monitoring events
  (:func:`describe`, shown by ``%jax_cluster status``). JAX stores compile times in whole
  seconds, so the time saved counts only programs that took a second or more to compile.
"""

from __future__ import annotations

import collections
import os
import threading
from typing import Any

from jaxnb._core.contract import COMPILE_CACHE_OFF, ENV_COMPILE_CACHE
from jaxnb._core.optional import problems, turn_off
from jaxnb._engine.compile import cache_folder

#: Executables that took at least this long to compile are written (JAX's default: 1 s).
MIN_COMPILE_SECONDS = 0.01
#: The folder's bound (least recently used entries go first).
MAX_BYTES = 2 * 1024**3
#: JAX's settings of the cache for interactive use (see the module's docstring).
SETTINGS = {
    "jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
    "jax_persistent_cache_min_entry_size_bytes": -1,  # any size
    "jax_compilation_cache_max_size": MAX_BYTES,
}
#: The feature a refused setting turns off (its line in ``status``).
TUNED = "compile cache settings"

_EVENTS = {
    "/jax/compilation_cache/cache_hits": "hits",
    "/jax/compilation_cache/compile_requests_use_cache": "lookups",
    "/jax/compilation_cache/cache_misses": "writes",
}
#: JAX's event for the compile time a cache hit saved.
SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"



class CacheStats:
    """What this process counted of JAX's cache events, and the folder it caches in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.saved = 0.0
        self.folder: str | None = None
        #: Why the cache is off on this host although it was asked for (a folder it cannot make).
        self.problem: str | None = None
        self.listening = False

    def on_event(self, event: str, **_: Any) -> None:
        if event in _EVENTS:
            with self.lock:
                self.counts[event] += 1

    def on_duration(self, event: str, duration_secs: float, **_: Any) -> None:
        if event == SAVED_EVENT:  # JAX keeps compile times in whole seconds: a hit of a program that
            with self.lock:  # compiled in under 1 s "saves" minus its read time; count it as 0
                self.saved += max(duration_secs, 0.0)


_stats = CacheStats()


def default_folder() -> str:
    """This host's default cache folder: ``$XDG_CACHE_HOME/jaxnb/xla`` or ``~/.cache/jaxnb/xla``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxnb", "xla")


def folder_from(value: str | None) -> str | None:
    """The folder ``--compile-cache``'s value names on this host (``None``: off)."""
    if value is None or not value.strip():
        return default_folder()
    if value == COMPILE_CACHE_OFF:
        return None
    return os.path.abspath(os.path.expanduser(value))


def enable_from_env() -> str | None:
    """Turn the cache on as ``JAXNB_COMPILE_CACHE`` says (before anything compiles); its folder."""
    if ENV_COMPILE_CACHE not in os.environ:
        return None  # not started by jaxnb
    return enable(folder_from(os.environ[ENV_COMPILE_CACHE]))


def enable(folder: str | None) -> str | None:
    """Cache compiled executables in ``folder`` from every process, and count hits (``None``: off)."""
    import jax.monitoring

    from jaxnb._engine import jax_internals

    if not _stats.listening:
        jax.monitoring.register_event_listener(_stats.on_event)
        jax.monitoring.register_event_duration_secs_listener(_stats.on_duration)
        _stats.listening = True
    if folder is not None:  # a host whose user has no home, a folder others can write: no cache
        _stats.problem = cache_folder.refusal(folder)
        folder = None if _stats.problem else folder
    if folder is None:
        jax_internals.set_config("jax_enable_compilation_cache", False)
        return None
    problem = jax_internals.set_config("jax_compilation_cache_dir", folder)
    if problem is not None:
        _stats.problem = problem
        return None
    for name, value in SETTINGS.items():
        problem = jax_internals.set_config(name, value)
        if problem is not None:
            turn_off(TUNED, f"{problem}; JAX's default applies")
    jax_internals.cache_from_every_process()
    _stats.folder = folder
    return folder


def describe() -> dict[str, Any]:
    """The cache as this process sees it: folder (``None``: off), its entries and bytes on this
    host, this process's hits, lookups, writes and compile seconds saved since it started, and
    the problem that turned it off here (``None`` when none did)."""
    folder = _stats.folder
    entries = size = 0
    if folder is not None:
        try:
            with os.scandir(folder) as found:
                for entry in found:
                    if entry.name.endswith("-cache") and entry.is_file():
                        entries += 1
                        size += entry.stat().st_size
        except OSError:
            pass
    with _stats.lock:
        counts = {name: _stats.counts[event] for event, name in _EVENTS.items()}
        saved = _stats.saved
    return {"folder": folder, "entries": entries, "bytes": size, **counts,
            "saved_seconds": round(saved, 3), "problem": _stats.problem,
            "features_off": problems()}
