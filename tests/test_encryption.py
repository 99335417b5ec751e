"""Which clusters encrypt their ipyparallel traffic (CurveZMQ): every one whose engines are on
other hosts; a local one stays on loopback unless ``JAXNB_CURVE=1``."""

from __future__ import annotations

import pytest

from jaxnb._core.options import ClusterOptions
from jaxnb._hosts import encryption, site
from jaxnb._lifecycle.launch import build_cluster

FLAG = "--IPController.enable_curve=True"


@pytest.mark.parametrize(("options", "encrypted"), [
    (ClusterOptions(n=2), False),
    (ClusterOptions(hosts=("10.0.0.2", "10.0.0.3")), True),
    (ClusterOptions(engines="mpi", hosts=("10.0.0.2", "10.0.0.3")), True),
    (ClusterOptions(engines="slurm", n=2), True),
    (ClusterOptions(engines="pbs", n=2), True),
])
def test_the_controller_encrypts_exactly_when_engines_are_elsewhere(options, encrypted, tmp_path,
                                                                   monkeypatch):
    monkeypatch.delenv(encryption.ENV, raising=False)
    where = site.for_options(options)
    assert (FLAG in encryption.controller_args(where, options)) is encrypted
    if where is site.LOCAL:  # built for real (not started): ipyparallel gets the flag
        assert FLAG not in build_cluster(options, where, str(tmp_path)).controller_args
        monkeypatch.setenv(encryption.ENV, "1")
        assert FLAG in build_cluster(options, where, str(tmp_path)).controller_args
    else:
        monkeypatch.setenv(encryption.ENV, "0")
        assert encryption.controller_args(where, options) == []


def test_status_says_how_the_traffic_travels():
    class Client:
        curve_serverkey = b"k" * 40

    class Plain:
        curve_serverkey = None

    assert encryption.status_line(Client(), local=False).startswith(
        "traffic to the engines: encrypted (CurveZMQ) and signed")
    assert encryption.status_line(Plain(), local=True) == (
        "traffic to the engines: on this machine's loopback, signed, not encrypted")
    assert encryption.status_line(Plain(), local=False).startswith(
        "traffic to the engines: signed, NOT encrypted")
