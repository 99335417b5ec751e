"""Memory readings as text, an out-of-memory error explained, the OOM killer found in the kernel
log: the pure logic, in milliseconds (the engines' side is tests/test_memory.py and
tests/test_out_of_memory.py)."""

from __future__ import annotations

import ipyparallel as ipp
import pytest

from jaxnb._core.errors import ProcessFailure, remote_error
from jaxnb._core.memory_text import MemoryReport, device_cells, memory_cell, merged_arrays
from jaxnb._engine.memory import oom_note
from jaxnb._engine.memory.oom_note import named_device, requested_bytes
from jaxnb._failures import out_of_memory
from jaxnb._hosts.oom_killer import killed_pids, since_start

GB = 10**9


def array(name, shape, nbytes, sharding="one device", replicas=1, devices=(0,)):
    return {"id": id(name), "name": name, "shape": list(shape), "dtype": "float32",
            "sharding": sharding, "bytes_per_device": nbytes, "devices": list(devices),
            "global_devices": replicas, "replicas": replicas}


CPU = {"process": 0, "host": "h", "pid": 1, "host_memory": {"rss": 2 * GB, "peak_rss": 3 * GB,
                                                             "total": 64 * GB, "available": 40 * GB},
       "devices": [{"id": 0, "name": "cpu:0", "kind": "cpu", "source": "live arrays",
                    "in_use": 5 * 10**6, "peak": None, "limit": None, "live_arrays": 5 * 10**6}],
       "arrays": [array("params['w']", (1000, 1000), 4 * 10**6), array("x", (10,), 40)],
       "array_count": 2, "array_bytes": 4 * 10**6 + 40}
GPU = {"process": 1, "host": "g", "pid": 2, "host_memory": {"rss": GB, "peak_rss": GB, "total": 64 * GB},
       "devices": [{"id": 1, "name": "gpu:1", "kind": "NVIDIA H100 80GB HBM3", "source": "device",
                    "in_use": 30 * GB, "peak": 50 * GB, "limit": 80 * GB, "live_arrays": 29 * GB}],
       "arrays": [array("params['w']", (1000, 1000), 4 * 10**6, devices=(1,))],
       "array_count": 1, "array_bytes": 4 * 10**6}


def test_a_cpu_device_says_its_in_use_is_the_live_arrays_and_its_limit_the_host():
    rows = device_cells([CPU, GPU])
    assert rows[0] == ["[p0]", "cpu:0 (cpu)", "5.0 MB live arrays", "—", "host memory 64.0 GB",
                       "2.0 GB (peak 3.0 GB)"]
    assert rows[1] == ["[p1]", "gpu:1 (NVIDIA H100 80GB HBM3)", "30.0 GB", "50.0 GB", "80.0 GB",
                       "1.0 GB (peak 1.0 GB)"]


def test_the_same_array_on_every_process_is_one_row_naming_them():
    merged = merged_arrays([CPU, GPU])
    assert [(r["name"], r["processes"], r["device_count"]) for r in merged] == [
        ("params['w']", [0, 1], 2), ("x", [0], 1)]
    text = MemoryReport([CPU, GPU]).text()
    assert "params['w']  (1000, 1000)  float32  one device  4.0 MB      2 devices: [p0], [p1]" in text
    assert "largest live arrays (of 3):" in text


def test_memory_cell_of_a_run():
    assert memory_cell({"source": "device", "in_use": GB, "peak": 3 * GB, "limit": 80 * GB}) == \
        "1.0 GB (peak 3.0 GB) of 80.0 GB"
    assert memory_cell({"source": "live arrays", "in_use": 10**6, "peak": 2 * 10**6, "rss": GB}) == \
        "1.0 MB arrays (peak 2.0 MB) · RSS 1.0 GB"
    assert memory_cell({"rss": GB, "peak_rss": 2 * GB}) == "RSS 1.0 GB (peak 2.0 GB)"
    assert memory_cell(None) == "—"


# ---- an out-of-memory error ---------------------------------------------------------------


def test_the_size_asked_for_and_the_device_come_from_xlas_text():
    assert requested_bytes("RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes.") == 2**42
    gpu = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 16.00GiB."
    assert requested_bytes(gpu) == 16 * 2**30
    assert requested_bytes("RESOURCE_EXHAUSTED: something else") is None
    assert named_device("Out of memory on device 3 while", [2, 3]) == 3
    assert named_device("Out of memory on device 3 while", [0, 1]) is None


def note(arrays, requested=2**42, device=None):
    device = device or {"id": 0, "name": "cpu:0", "kind": "cpu", "source": "live arrays",
                        "in_use": 10**8, "peak": None, "limit": None}
    return {"process": 1, "message": "RESOURCE_EXHAUSTED: Out of memory", "text": "RESOURCE_EXHAUSTED",
            "requested": requested, "device": device, "host_memory": {"total": 64 * GB, "available": 9 * GB},
            "arrays": arrays, "array_count": len(arrays),
            "array_bytes": sum(a["bytes_per_device"] for a in arrays)}


def test_a_replicated_array_is_told_to_be_sharded():
    tips = out_of_memory.suggestions(note([array("params['w']", (8192, 8192), 256 * 10**6,
                                                 "P() replicated on 8 devices", replicas=8)],
                                          requested=10**6))
    assert len(tips) == 1
    assert tips[0].startswith("shard `params['w']`: replicated, 8 devices each hold the same 256.0 MB")


def test_an_old_and_new_state_of_the_same_shape_are_told_to_donate():
    def tips(*names):
        return out_of_memory.suggestions(note([array(n, (4096, 4096), 64 * 10**6) for n in names],
                                              requested=10**6))

    said = tips("state['w']", "new_state['w']")
    assert len(said) == 1 and said[0].startswith("donate buffers: `state['w']` and `new_state['w']`")
    assert not any(t.startswith("donate") for t in tips("params['w']", "opt_state['w']"))  # Adam's
    assert tips("params['w']", None)[0].startswith("donate buffers: `params['w']` and the float32")


def test_a_large_ask_next_to_small_arrays_is_told_to_rematerialise_and_lower_the_batch():
    tips = out_of_memory.suggestions(note([array("w", (10,), 40)]))
    assert [t.split(":")[0].split(" (")[0] for t in tips] == ["rematerialise", "lower the per-process batch"]


def test_the_one_line_names_process_device_size_and_limit():
    line = out_of_memory.one_line(1, note([]), "RESOURCE_EXHAUSTED: Out of memory")
    assert line == ("[p1] ran out of memory on cpu:0 (cpu): XLA asked for 4.4 TB; limit host memory "
                    "64.0 GB, 9.0 GB free")
    gpu = note([], requested=17 * GB, device={"id": 3, "name": "gpu:3", "kind": "H100", "limit": 80 * GB,
                                              "source": "device", "in_use": 70 * GB, "peak": 79 * GB})
    assert out_of_memory.one_line(1, gpu, "") == "[p1] ran out of memory on gpu:3 (H100): XLA asked for " \
                                                 "17.0 GB; limit 80.0 GB"
    unknown = {"message": "RESOURCE_EXHAUSTED: Out of memory", "text": "RESOURCE_EXHAUSTED: Out of memory"}
    assert out_of_memory.one_line(0, unknown, unknown["text"]) == \
        "[p0] ran out of memory: XLA: RESOURCE_EXHAUSTED: Out of memory; limit not known"


XLA = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 16.00GiB.\n" + "\n".join(
    f"BufferAssignment line {i}" for i in range(40))


def remote(text: str) -> ipp.error.RemoteError:
    """The error ipyparallel gives the notebook for an exception on an engine."""
    return ipp.error.RemoteError("JaxRuntimeError", text,
                                 f"Traceback\nCell In[3], line 2\n----> 2 step()\n\nJaxRuntimeError: {text}")


class StoppedGroup:
    """A group whose cluster is stopped: the error is explained from XLA's text alone."""

    running = False


def test_an_out_of_memory_error_is_rewritten_cause_first_with_xlas_text_folded():
    errors = {1: remote(XLA), 0: remote("ValueError: other")}
    errors[0].ename = "ValueError"
    error = out_of_memory.explain(StoppedGroup(), remote_error(errors), errors)
    assert error.summary == ("[p1] ran out of memory: XLA: RESOURCE_EXHAUSTED: Out of memory while trying "
                             "to allocate 16.00GiB.; limit not known")
    assert error.tracebacks[0].startswith("([p1] did not say which arrays it held")
    assert "RESOURCE_EXHAUSTED" in error.xla_text and error.processes == [0, 1]
    assert out_of_memory.fold(XLA, {XLA}).splitlines()[-1].startswith("… 37 more lines of XLA's text")
    plain = {0: remote("ValueError: no")}
    same = remote_error(plain)
    assert out_of_memory.explain(StoppedGroup(), same, plain).summary == same.summary  # not an OOM


def test_a_divergence_keeps_what_followed_after_the_explanation():
    errors = {1: remote("RESOURCE_EXHAUSTED: Out of memory allocating 4398046511104 bytes.")}
    failure = ProcessFailure("processes diverged: [p1] raised …; jaxnb interrupted [p0]", [0], ["where"])
    out_of_memory.explain(StoppedGroup(), failure, errors)
    assert failure.summary.startswith("[p1] ran out of memory")
    assert failure.tracebacks[1] == "Then: processes diverged: [p1] raised …; jaxnb interrupted [p0]"
    assert failure.tracebacks[2] == "where" and failure.processes == [0, 1]


# ---- the kernel's OOM killer ----------------------------------------------------------------

DMESG = "\n".join([
    "[ 4590.882854] jxlab26480b: port 2(jxlab26480v2) entered disabled state",
    "[ 5001.100000] python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
    "[ 5001.200000] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/jx,task_memcg=/jx,task=python,pid=30799,uid=0",
    "[ 5001.200100] Memory cgroup out of memory: Killed process 30799 (python) total-vm:3000000kB, "
    "anon-rss:600000kB",
    "[ 6000.000000] Out of memory: Killed process 4242 (python3) total-vm:9000kB, anon-rss:80kB",
])
KMSG = "6,1234,5001200100,-;Memory cgroup out of memory: Killed process 777 (python) total-vm:1kB"


def test_oom_kills_are_read_from_the_kernel_log_in_both_forms():
    assert killed_pids(DMESG) == {30799, 4242}
    assert killed_pids(DMESG, since=5500.0) == {4242}  # a reused pid's old kill is not counted
    assert killed_pids(KMSG) == {777} and killed_pids(KMSG, since=5002.0) == set()
    assert killed_pids("[ 1.0] Killed process 12 (sshd)") == set()  # not the OOM killer's


@pytest.mark.parametrize("line", [
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 16.00GiB.",
    "INTERNAL: Error dispatching computation: Out of memory allocating 17626545782784 bytes.",
    "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm.",
])
def test_out_of_memory_errors_are_found_in_xlas_words(line):
    assert out_of_memory.out_of_memory({2: remote(line), 3: remote("ValueError: bad shape")}) == {2: line}
    assert oom_note.is_out_of_memory(RuntimeError(line)) and not oom_note.is_out_of_memory(ValueError("x"))


def test_another_hosts_kill_counts_only_after_the_engine_started_there():
    """An engine on another host that started 100 s ago, on a host up 6,050 s: only kills
    logged after 5,950 s (less 1 s) are its (the lab's hosts share this machine's kernel log,
    where a pid reused since an earlier OOM kill was once taken for one)."""
    since = since_start("6050.25 12000.00", elapsed=100.0)
    assert since == 5949.25
    assert killed_pids(DMESG, since) == {4242}
    assert since_start("", 100.0) is None and since_start("6050.25 1.0", None) is None


def test_an_engine_another_process_started_is_named_oom_killed_only_if_seen_running_before(monkeypatch):
    """A supervisor or a kernel that attached is not the engines' parent: it cannot read their
    exit status, but it reads the kernel log for an OOM kill since it last saw the pid running."""
    import signal
    import subprocess
    import sys
    import time

    from jaxnb._failures import detect
    from jaxnb._hosts import oom_killer

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert detect.ended_elsewhere(child.pid) is None  # running: its start is noted
    stamp = oom_killer.seconds_since_boot(time.time()) + 0.5
    log = f"[{stamp:12.6f}] Out of memory: Killed process {child.pid} (python3) total-vm:1kB\n"
    monkeypatch.setattr(oom_killer, "kernel_log", lambda: log)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert detect.ended_elsewhere(child.pid) == oom_killer.KILLED
    other = subprocess.Popen([sys.executable, "-c", "pass"])
    other.wait()  # never seen running: a kill of its pid in the log is not taken for its end
    monkeypatch.setattr(oom_killer, "kernel_log", lambda: log.replace(str(child.pid), str(other.pid)))
    assert detect.ended_elsewhere(other.pid) == "exited"
