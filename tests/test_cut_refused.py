"""A cut of the collectives' connections that the kernel refuses (no ptrace rights: Yama's
``ptrace_scope=1`` on Ubuntu and Debian, or another user's engines) is counted and said, never
reported as connections closed."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from support.other_user import other_user_fixture, run_as  # noqa: F401 - fixtures

from jaxnb._hosts import cut_outcome, sockets

SCRIPT = Path(sockets.__file__).read_text() + "\nimport sys\nmain(sys.argv[1])\n"


def test_a_helper_without_ptrace_rights_cuts_nothing_and_says_so(other_user):
    """The helper runs as an unprivileged user (as ssh starts it under Yama's rules: not the
    engine's ancestor); the connection it was asked to cut stays open, and the answer says why."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        plan = {str(os.getpid()): [[client.fileno(), list(client.getsockname())]]}
        done = run_as(other_user, SCRIPT, json.dumps({"cut": plan}))
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout.splitlines()[-1])
        assert answer == {"cut": 0, "denied": 1, "ptrace_scope": sockets.ptrace_scope()}
        client.sendall(b"still open")
        assert peer.recv(16) == b"still open"
        cut_outcome.reset()
        assert cut_outcome.record("host-b", answer) == 0
        assert cut_outcome.why_not() == (
            "host-b would not hand the engines' sockets to jaxnb (1 refused): "
            + ("jaxnb's helper has no ptrace rights over the engines there"
               if not answer["ptrace_scope"] else
               f"Yama's ptrace_scope is {answer['ptrace_scope']} there, which lets only a "
               "process's ancestors take its descriptors (sudo sysctl "
               "kernel.yama.ptrace_scope=0 allows it)"))
    finally:
        for s in (client, peer, server):
            s.close()


def test_a_cut_this_process_may_do_is_counted():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    try:
        pid = os.getpid()
        answer = sockets.cut({str(pid): [[client.fileno(), list(client.getsockname())]]})
        assert answer["cut"] == 1 and answer["denied"] == 0
        assert peer.recv(16) == b""  # shut down
        cut_outcome.reset()
        assert cut_outcome.record("here", answer) == 1 and cut_outcome.why_not() is None
    finally:
        for s in (client, peer, server):
            s.close()


def test_yama_is_named_when_it_refused():
    cut_outcome.reset()
    cut_outcome.record("gpu-3", {"cut": 0, "denied": 4, "ptrace_scope": 1})
    assert cut_outcome.why_not() == (
        "gpu-3 would not hand the engines' sockets to jaxnb (4 refused): Yama's ptrace_scope is 1 "
        "there, which lets only a process's ancestors take its descriptors (sudo sysctl "
        "kernel.yama.ptrace_scope=0 allows it)")
