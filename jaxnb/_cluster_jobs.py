"""``JaxCluster``'s jobs, with their keywords: ``train``, ``tune`` and ``profile``.

Each option of ``%jax_train``, ``%jax_tune`` and ``%%jax_profile`` is a keyword of the same name
(``--max-failures`` is ``max_failures=``); the magics are thin wrappers over these, and
``tests/test_api.py`` checks that flags and keywords agree.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from jaxnb._core.errors import ClusterStateError
from jaxnb._core.run_limits import KEEP_CHECKPOINTS
from jaxnb._core.state import Group
from jaxnb._hosts import site
from jaxnb._tune.options import DEFAULT_METRIC, DEFAULT_TRIALS, TuneOptions

if TYPE_CHECKING:  # loaded on first use: a run's modules (matplotlib, widgets) are not needed
    # to start, attach or run cells
    from jaxnb._profile.result import ProfileResult
    from jaxnb._train.resize import Sizes
    from jaxnb._train.result import Result
    from jaxnb._tune.result import TuneResult

NOT_NAMED = ("this cluster has no name, so {run!r} cannot outlive its kernel: use the result its "
             "train() or tune() returned; start clusters with {attach} to attach their runs and "
             "searches later")
NOT_HERE = ("no run {run!r} in the record of the cluster on {host} (attached through --via): name "
            "its folder of runs there, {storage}")


class ClusterJobs:
    """The jobs of :class:`jaxnb.JaxCluster` (its base class: the cluster's life is there)."""

    group: Group
    #: Restart the cluster and replay its setup (a run's recovery); ``JaxCluster`` defines it.
    _recover: Callable[[], dict[str, float]]
    #: What the cluster does for a run that changes size; ``JaxCluster`` defines it.
    _sizes: Callable[[], Sizes]
    #: A named cluster's record of its runs and searches (``Attaching`` defines them).
    _note_run: Callable[[str, str, str], None]
    _run_folder: Callable[[str], str | None]

    def train(
        self,
        fn: Callable[..., Any] | str,
        config: Any = None,
        *,
        name: str | None = None,
        storage: str | os.PathLike[str] | None = None,
        resume: bool = False,
        background: bool = False,
        steps: int | None = None,
        datasets: Mapping[str, str] | None = None,
        max_failures: int = 0,
        keep_checkpoints: int = KEEP_CHECKPOINTS,
        min_processes: int | None = None,
        profile_steps: tuple[int, int] | str | None = None,
        break_lock: bool = False,
        on_result: Callable[[Result], None] | None = None,
    ) -> Result:
        """Run ``fn`` (or ``fn(config)``) on every process with a live dashboard; a ``Result``.

        ``fn``: a function, or the name of one defined on the engines. The run lives in
        ``storage/name`` (default ``./jaxnb_runs/<fn's name>``); ``resume``: continue it from
        its latest checkpoint. ``background``: return the live Result at once. ``steps``: how
        many steps it reports (progress and ETA). ``datasets``: name -> engine variable, for
        ``jaxnb.get_dataset_shard(name)``. ``max_failures=N``: when a process dies or a host is
        lost, restart the cluster, replay the setup and resume from the latest checkpoint, up
        to N times (-1: no limit); ``keep_checkpoints``: the newest checkpoints kept (default 3);
        ``min_processes=K``: when a lost process or host is not back in a few
        seconds, go on with the processes left (at least K), the checkpoint resharded and the
        data re-split, and grow back at a checkpoint when it answers again (or on ``scale``).
        ``profile_steps=(A, B)`` (or ``"A:B"``): trace steps A to B on every
        process, as ``profile`` does (``Result.profile``). ``break_lock``: remove the run
        folder's lock left by a kernel that is gone (refused while its host answers).
        ``on_result`` gets the final Result, also before an error is raised.

        Raises:
            jaxnb.ClusterStateError: the cluster is not running, or busy with another run.
            jaxnb.RemoteError: ``fn`` raised on some process (also in ``Result.error``).
            jaxnb.ProcessFailure: a process died (after ``max_failures`` recoveries).
            ValueError: a wrong argument (named as the keyword, or as the flag from the magic).

        Example::

            result = cluster.train(train_func, {"steps": 200}, name="mlp", max_failures=2)
            result.metrics, len(result.history), result.checkpoint
        """
        from jaxnb._core import run_folder
        from jaxnb._failures import repair
        from jaxnb._profile import training
        from jaxnb._train import driver

        window = None if profile_steps is None else training.window(profile_steps, background)
        self.group.require_running()
        needs_host = [k for k, v in (("max_failures", max_failures), ("min_processes", min_processes),
                                     ("break_lock", break_lock)) if v not in (0, None, False)]
        if needs_host and self.group.via_host is not None:  # recoveries, the run's lock are there
            from jaxnb._core import spelling

            raise self.group.attachment.refuse(spelling.bare(needs_host[0]))
        if min_processes is not None:
            site.check_resizes(self.group)
        repair.ensure_ready(self.group)
        from jaxnb._train.function import run_name

        folder = os.path.abspath(os.path.join(os.fspath(storage or driver.DEFAULT_STORAGE),
                                              run_name(fn, name)))
        if break_lock:
            run_folder.break_lock(folder)

        def noted(opened: str) -> None:  # the folder as opened (through --via: the host's)
            self._note_run(os.path.basename(opened), opened, "run")

        def run(on_result: Callable[[Result], None] | None) -> Result:
            return driver.train(self.group, fn, config, name=name, storage=storage, resume=resume,
                                background=background, total_steps=steps, on_result=on_result,
                                datasets=datasets, max_failures=max_failures, restart=self._recover,
                                keep_checkpoints=keep_checkpoints,
                                min_processes=min_processes,
                                sizes=None if min_processes is None else self._sizes(),
                                on_folder=noted)

        if window is None:
            return run(on_result)
        return training.traced(self.group, fn, name, storage, window, run, on_result)

    def result(self, run: str, *, storage: str | os.PathLike[str] | None = None,
               show: bool = False) -> Result | TuneResult:
        """The live result of run or search ``run``, going on on this named cluster (started in a
        kernel that is gone, say), read from its folder ``storage/run``: a ``Result`` with every
        report since the run began, or for a search (a folder that holds a study) a
        ``TuneResult`` with every trial since it began; ``wait()`` returns at its end. Without
        ``storage``, the folder the cluster's record has for ``run`` (the host's, through
        ``--via``; else ``./jaxnb_runs``).
        ``show``: its live dashboard (a search's view).

        Raises:
            jaxnb.ClusterStateError: the cluster is not running here, or not a named cluster.
            FileNotFoundError: no run or study of that name in ``storage``.
            ValueError: ``run`` is not a plain folder name.
        """
        from jaxnb._core import spelling
        from jaxnb._train import driver, followed
        from jaxnb._train.function import run_name

        group = self.group
        group.require_running()
        run = run_name(None, run)
        if group.attachment is None:
            raise ClusterStateError(NOT_NAMED.format(run=run, attach=spelling.example("name", "NAME")))
        known = self._run_folder(run) if storage is None else None
        run_dir = known or os.path.abspath(os.path.join(os.fspath(storage or driver.DEFAULT_STORAGE), run))
        host = group.via_host
        tail = None
        if host is not None and not os.path.isdir(run_dir):  # read on the host, over ssh
            if known is None and (storage is None or not os.path.isabs(os.fspath(storage))):
                raise ClusterStateError(NOT_HERE.format(run=run, host=host, storage=spelling.example(
                    "storage", "/ABSOLUTE/DIR")))
            from jaxnb._core import run_reports

            tail = group.attachment.tail(run_reports.path(run_dir))
        from jaxnb._tune import attached

        if tail is None and attached.is_study(run_dir):
            parent = os.path.dirname(run_dir)  # named in the resume hint unless the default's
            shown = "" if parent == os.path.abspath(driver.DEFAULT_STORAGE) else parent
            from jaxnb._attach import queue

            engines = [p.engine_id for p in group.processes]
            return attached.follow(run_dir, run, show, lambda: queue.busy(group.client, engines),
                                   shown, lambda: followed.stop_run(group))
        dashboard = None
        if show:
            from jaxnb._widgets.dashboard import Dashboard

            dashboard = Dashboard(run, group.size, on_stop=lambda: followed.stop_run(group))
        return followed.follow(group, run_dir, run, dashboard, tail)

    def tune(
        self,
        fn: Callable[..., Any] | str,
        space: Any,
        *,
        trials: int = DEFAULT_TRIALS,
        metric: str = DEFAULT_METRIC,
        mode: str = "min",
        pruner: str = "median",
        config: Mapping[str, Any] | None = None,
        name: str | None = None,
        storage: str | os.PathLike[str] | None = None,
        steps: int | None = None,
        datasets: Mapping[str, str] | None = None,
        max_failures: int = 0,
        keep_checkpoints: int = KEEP_CHECKPOINTS,
        resume: bool = False,
        background: bool = False,
        seed: int | None = None,
        show: bool = True,
        break_lock: bool = False,
        on_result: Callable[[TuneResult], None] | None = None,
    ) -> TuneResult:
        """Hyperparameter search: each trial one ``train`` run on every process; a ``TuneResult``.

        Each keyword but ``on_result`` is the :class:`~jaxnb._tune.options.TuneOptions` field of
        its name; see :func:`jaxnb.tune.run`, which it calls with this cluster.
        """
        given = {k: v for k, v in locals().items() if k not in ("self", "fn", "space", "on_result")}
        from jaxnb._failures import repair

        options = TuneOptions(**given)
        self.group.require_running()
        repair.ensure_ready(self.group)
        from jaxnb._train import driver
        from jaxnb._train.function import run_name

        study = run_name(fn, name)
        self._note_run(study, os.path.abspath(os.path.join(
            os.fspath(storage or driver.DEFAULT_STORAGE), study)), "search")
        from jaxnb._tune.runner import tune  # Optuna's side, loaded when a search starts

        return tune(self.group, fn, space, options, on_result=on_result, restart=self._recover)

    def profile(self, code: str, *, name: str | None = None, storage: str | None = None,
                on_result: Callable[[ProfileResult], None] | None = None) -> ProfileResult:
        """Run ``code`` like :meth:`run` while every process traces it; a ``ProfileResult``.

        Args:
            code: Python source, run as a ``%%jax_profile`` cell.
            name: the run's folder name (default ``profile``).
            storage: where run folders live (default ``./jaxnb_runs``).
            on_result: called with the ``ProfileResult``, also when the cell raised, before
                the error is raised.

        Raises:
            jaxnb.ClusterStateError: the cluster is not running, or busy with a background run.
            jaxnb.RemoteError: the code raised on some processes (after the table is shown).
        """
        from jaxnb._failures import repair
        from jaxnb._profile import session

        self.group.require_idle()
        repair.ensure_ready(self.group)

        return session.profile(self.group, code, name=name, storage=storage,
                               timeout=self.group.options.timeout, on_result=on_result)
