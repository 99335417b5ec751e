"""TPU VM slice discovery (pure: environment and metadata formats; no TPU, no metadata server)."""

from __future__ import annotations

import pytest

from jaxnb._hosts.tpu import Slice, SliceError, discover, parse_endpoints


def test_worker_hostnames_and_worker_id():
    env = {"TPU_WORKER_HOSTNAMES": "10.0.0.2, 10.0.0.3,10.0.0.4", "TPU_WORKER_ID": "1"}
    found = discover(env, ask_metadata=False)
    assert found == Slice(("10.0.0.2", "10.0.0.3", "10.0.0.4"), 1)
    assert found.others == ("10.0.0.2", "10.0.0.4")


def test_this_worker_is_found_among_this_machines_addresses():
    env = {"TPU_WORKER_HOSTNAMES": "10.255.255.7,127.0.0.1"}
    assert discover(env, ask_metadata=False).this == 1


def test_not_a_slice():
    assert discover({}, ask_metadata=False) is None
    assert discover({"TPU_WORKER_HOSTNAMES": "10.0.0.2", "TPU_WORKER_ID": "0"}, ask_metadata=False) is None


def test_bad_worker_id_and_unknown_worker():
    with pytest.raises(SliceError, match="TPU_WORKER_ID"):
        discover({"TPU_WORKER_HOSTNAMES": "a,b", "TPU_WORKER_ID": "2"}, ask_metadata=False)
    with pytest.raises(SliceError, match="set TPU_WORKER_ID"):
        discover({"TPU_WORKER_HOSTNAMES": "10.255.255.7,10.255.255.8"}, ask_metadata=False)


def test_metadata_endpoint_formats():
    assert parse_endpoints("t1v-n-0,t1v-n-1") == ("t1v-n-0", "t1v-n-1")
    assert parse_endpoints("a:0:10.0.0.2,b:1:10.0.0.3") == ("10.0.0.2", "10.0.0.3")
    with pytest.raises(SliceError):
        parse_endpoints("a:b")
