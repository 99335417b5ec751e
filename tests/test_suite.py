"""The suite's own rules: what cannot run here is skipped with its reason, or fails where CI
requires it (``JAXNB_REQUIRE_LAB=1``, set by ``.ci/run``); jaxnb's warnings fail a test, other
libraries' do not; an xfail that passes fails."""

from __future__ import annotations

import pathlib
import socket
import warnings

import pytest
from support.factories import REQUIRE, free_port, unavailable

CI = pathlib.Path(__file__).resolve().parents[1] / ".ci" / "run"


def test_what_cannot_run_here_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.delenv(REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^lab tests skipped: not root$"):
        unavailable("lab tests", "not root")


def test_where_it_is_required_it_fails_with_the_reason(monkeypatch):
    monkeypatch.setenv(REQUIRE, "1")
    with pytest.raises(pytest.fail.Exception,
                       match=r"^browser tests cannot run: no chromium \(JAXNB_REQUIRE_LAB=1"):
        unavailable("browser tests", "no chromium")


@pytest.mark.parametrize("required", ["", "1"])
def test_what_can_run_is_neither_skipped_nor_failed(monkeypatch, required):
    monkeypatch.setenv(REQUIRE, required)
    for why in (None, ""):
        unavailable("lab tests", why)


def test_ci_requires_the_lab_browser_and_slurm_tests():
    assert f"{REQUIRE}=1 bash dev test" in CI.read_text()


def test_free_port_is_free_on_loopback():
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))


def _warn_from(module: str) -> None:
    """Issue a warning as code of ``module`` does."""
    exec(compile("import warnings\nwarnings.warn('careful', UserWarning)", module, "exec"),
         {"__name__": module})


def test_a_warning_from_jaxnb_fails_the_test():
    with pytest.raises(UserWarning, match="careful"):
        _warn_from("jaxnb._widgets.dashboard")


def test_a_warning_from_another_library_does_not():
    with warnings.catch_warnings(record=True) as caught:
        _warn_from("ipyparallel.client")
    assert [str(w.message) for w in caught] == ["careful"]


def test_an_xfail_that_passes_fails(request):
    assert request.config.getini("xfail_strict") is True
