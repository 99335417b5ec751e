"""The error for a death names the cause first (pure: no engines needed)."""

from __future__ import annotations

from ipyparallel.error import RemoteError as IppRemoteError

from jaxnb._failures.cause import death_failure, first_deaths, tracebacks

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
    assert tracebacks({2: error}) == "---- [p2] ----\nValueError: bad"
