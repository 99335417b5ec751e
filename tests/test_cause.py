"""The error for a death names the cause first (pure: no engines needed)."""

from __future__ import annotations

from ipyparallel.error import RemoteError as IppRemoteError

from jaxnb._failures.cause import death_failure, first_deaths, size_mismatch, tracebacks
from jaxnb._failures.explain import log_tail

ABORTED = (
    "F1123 client.h:80] Terminating process because the JAX distributed service detected "
    "fatal errors. This most likely indicates that another task died\n"
    "Fatal Python error: Aborted"
)


def describe(dead: dict[int, str]) -> str:
    return "\n".join(f"[p{p}] {how}." for p, how in sorted(dead.items()))


def one_line(dead: dict[int, str]) -> str:
    return "; ".join(f"[p{p}] {how}" for p, how in sorted(dead.items()))


def test_a_process_aborted_by_the_coordination_service_follows_the_first_death():
    dead = {0: "was killed by SIGKILL", 1: "was killed by SIGABRT"}
    assert first_deaths(dead, {0: "Handling execute_request", 1: ABORTED}) == ([0], [1])
    # Nothing says who followed whom: every death is a cause.
    assert first_deaths(dead, {}) == ([0, 1], [])
    assert first_deaths(dead, {0: ABORTED, 1: ABORTED}) == ([0, 1], [])


def test_the_death_comes_before_the_survivors_errors():
    gloo = IppRemoteError("JaxRuntimeError", "Gloo all-reduce failed: Connection closed by peer",
                          "Traceback ...\nJaxRuntimeError: Gloo all-reduce failed")
    engine = IppRemoteError("EngineError", "Engine 1 died while running task", "")
    failure = death_failure({1: "was killed by SIGKILL"}, {0: gloo, 1: engine},
                            {1: "last line"}, describe, one_line, ["a note"])
    assert failure.summary == (
        "[p1] was killed by SIGKILL; then [p0] failed as a consequence; the jax.distributed "
        "group is broken: run `%jax_cluster restart`"
    )
    assert failure.processes == [1]
    text = str(failure)
    assert text.index("[p1] was killed by SIGKILL.") < text.index("[p0] raised, as a consequence")
    assert text.index("JaxRuntimeError: Gloo all-reduce failed") < text.index("a note")
    assert "EngineError" not in text  # the dead process's EngineError: the death says more


def test_followers_are_named_after_the_cause():
    failure = death_failure({0: "was killed by SIGKILL", 1: "was killed by SIGABRT"}, {},
                            {1: ABORTED}, describe, one_line)
    assert failure.summary.startswith("[p0] was killed by SIGKILL; then [p1] failed as a consequence")
    assert failure.tracebacks[1] == "Then, as a consequence: [p1] was killed by SIGABRT."


def test_tracebacks_lose_their_colours():
    error = IppRemoteError("ValueError", "bad", ["\x1b[31mValueError\x1b[0m: bad"])
    assert tracebacks({2: error}) == ("---- [p2] ----\nValueError: bad",) * 2


def test_the_survivors_tracebacks_show_the_users_frames_and_keep_every_frame():
    text = ("Cell In[4], line 2\n----> 2 total(1.0)\n\n"
            "File /v/site-packages/jax/_src/interpreters/pxla.py:395, in __call__\n--> 395   x\n\n"
            "JaxRuntimeError: Gloo all-reduce failed")
    gloo = IppRemoteError("JaxRuntimeError", "Gloo all-reduce failed", text)
    failure = death_failure({1: "was killed by SIGKILL"}, {0: gloo}, {}, describe, one_line)
    assert "pxla.py" not in str(failure) and "(1 frame of JAX not shown; " in str(failure)
    assert "----> 2 total(1.0)" in str(failure)
    assert "pxla.py:395" in failure.full_traceback and "[p1] was killed" in failure.full_traceback


#: What a process aborted by gloo wrote (recorded): another thread's abort and faulthandler's
#: line may cut into it.
GLOO_ABORT = (
    "terminate called after throwing an instance of 'Fatal Python error: Aborted\n"
    "Extension modules: jaxlib.cpu_feature_guard, numpy.random.bit_generatorgloo::EnforceNotMet'\n"
    "  what():  [enforce fail at external/gloo/gloo/transport/tcp/pair.cc:459] "
    "op.preamble.length <= op.nbytes. 18 vs 4. Received data size doesn't match expected size. "
    "Is there a distributed collective mismatch in your code?\n"
)


def test_a_collective_size_mismatch_leads_the_error_with_gloos_sizes():
    assert size_mismatch(GLOO_ABORT) == "gloo's sizes 18 vs 4"
    assert size_mismatch("Received data size doesn't match expected size.") == ""
    assert size_mismatch(ABORTED) is None
    failure = death_failure({0: "was killed by SIGABRT", 1: "was killed by SIGABRT"}, {},
                            {0: GLOO_ABORT, 1: ABORTED}, describe, one_line)
    assert failure.summary.startswith(
        "collective size mismatch: the processes passed arrays of different sizes to one "
        "collective ([p0] got more than it expected, gloo's sizes 18 vs 4), so gloo aborted [p0]; "
        "[p0] was killed by SIGABRT; then [p1] failed as a consequence; "), failure.summary
    assert failure.mismatch
    assert not death_failure({1: "was killed by SIGKILL"}, {}, {1: ABORTED}, describe, one_line).mismatch


def test_a_crash_is_quoted_with_what_led_to_it_and_what_arrived_after_the_dump():
    log = ("Handling execute_request: 1\nterminate called after throwing an instance of 'gloo'\n"
           "  what():  [enforce fail] Received data size doesn't match expected size.?Fatal Python "
           "error: Aborted\n\nThread 0x7f (most recent call first):\n  File \"x.py\", line 3 in f\n\n"
           "Extension modules: numpy (total: 1)\nthe tee's late line\n")
    assert log_tail(log) == [
        "Handling execute_request: 1", "terminate called after throwing an instance of 'gloo'",
        "  what():  [enforce fail] Received data size doesn't match expected size.?Fatal Python "
        "error: Aborted", "the tee's late line"]


def test_the_names_a_cell_reads_are_asked_about_first():
    from jaxnb._failures.stale import names_read

    assert names_read("y = f(mesh, g)\nprint(y.sum())") == ["f", "mesh", "g", "print", "y"]
    assert names_read("%time x = 1\nz = g") == ["get_ipython", "g"]
    assert names_read("def (") == []


def test_the_reason_of_an_abort_is_quoted_wherever_it_fell_in_the_log():
    """Under load C++'s last words land far before faulthandler's line, or inside a dump line
    (stderr is shared by threads): they are quoted all the same (the flake of issue 44)."""
    what = ("  what():  [enforce fail at pair.cc:459] op.preamble.length <= op.nbytes. 10 vs 4. "
            "Received data size doesn't match expected size.")
    early = ("Handling execute_request: 1\nterminate called after throwing an instance of 'gloo'\n"
             + what + "\n" + "".join(f"other line {i}\n" for i in range(20))
             + "Fatal Python error: Aborted\n\nThread 0x7f (most recent call first):\n"
             "  File \"x.py\", line 3 in f\n")
    tail = log_tail(early)
    assert tail[:2] == ["terminate called after throwing an instance of 'gloo'", what], tail
    assert tail[-1] == "Fatal Python error: Aborted" and "other line 7" not in tail, tail
    inside = ("Fatal Python error: Aborted\nThread 0x7f (most recent call first):\n"
              "  File \"threading.py\", line 1002 in _bootstrap" + what + "\n"
              "  File \"x.py\", line 3 in f\nExtension modules: numpy (total: 1)\n")
    assert log_tail(inside) == ["Fatal Python error: Aborted", what]
    assert log_tail("a\nb\n") == ["a", "b"]
