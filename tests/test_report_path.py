"""What ``jaxnb.report()`` does on the training thread, the pure logic: the step it takes, the JAX
values it keeps in flight (waiting only on those of the report MAX_IN_FLIGHT ago), and the
publisher thread that copies the values to the host and sends every record, in order, none
lost. In milliseconds; the engines' side is tests/test_train.py, the cost bench/train_throughput.py."""

from __future__ import annotations

import enum
import json
import threading

import jax
import jax.numpy as jnp
import numpy as np

from jaxnb._core.contract import REPORT_KEY
from jaxnb._core.run_folder import Checkpoint, saved_report
from jaxnb._engine.run.in_flight import InFlight, max_in_flight
from jaxnb._engine.run.publisher import BatchPublisher, host_metrics
from jaxnb._engine.run.reporting import _int_or_none


class Epoch(enum.IntEnum):
    FIRST = 7


def test_the_step_is_an_int_given_as_one_never_a_bool_nor_a_jax_value():
    assert [_int_or_none(v) for v in (5, np.int64(6), Epoch.FIRST)] == [5, 6, 7]
    assert type(_int_or_none(Epoch.FIRST)) is int
    assert [_int_or_none(v) for v in (True, None, 2.0, "3", jnp.int32(4))] == [None] * 5


def test_only_the_values_of_the_report_max_in_flight_ago_are_waited_on():
    in_flight = InFlight()
    assert in_flight.limit is None and len(in_flight) == 0
    in_flight.add([1.0, "text", np.float32(2)])  # no JAX value yet: nothing decided, nothing kept
    assert in_flight.limit is None and len(in_flight) == 1
    values = [jnp.float32(i) * 2 for i in range(12)]
    for v in values:
        in_flight.add([v, 0.5, {"nested": v}])  # only top-level JAX values count
    assert in_flight.limit == max_in_flight(jax)
    assert len(in_flight) == in_flight.limit  # older reports were waited on and dropped
    assert in_flight.values() == [[v] for v in values[-in_flight.limit:]]


def test_values_of_a_type_first_seen_before_jax_was_imported_are_still_learnt():
    in_flight = InFlight()
    in_flight.add([3])
    in_flight.add([jnp.ones(2)])
    in_flight.add([4])
    assert [len(r) for r in in_flight.values()] == [0, 1, 0]


def test_every_record_added_from_another_thread_is_published_in_order():
    sent: list[dict] = []
    publisher = BatchPublisher(sent.append, interval=0.001)
    values = [jnp.float32(i) + 1 for i in range(500)]

    def training() -> None:
        for i, v in enumerate(values):
            publisher.add({"process": 0, "seq": i, "step": i + 1, "time": 0.0, "checkpoint": None,
                           "metrics": {"loss": v, "n": np.int32(i), "vec": np.arange(2), "s": "x"}})

    thread = threading.Thread(target=training)
    thread.start()
    thread.join()
    publisher.close()
    records = [r for batch in sent for key, rs in batch.items() if key.startswith(REPORT_KEY)
               for r in rs]
    assert [r["seq"] for r in records] == list(range(500))
    assert [key for batch in sent for key in batch] == [f"{REPORT_KEY}{i}" for i in range(len(sent))]
    assert records[3]["metrics"] == {"loss": 4.0, "n": 3, "vec": [0, 1], "s": "x"}
    assert all(type(r["metrics"]["loss"]) is float for r in records)
    assert publisher.batches == len(sent)


def test_a_record_that_names_a_checkpoint_is_sent_at_once_not_at_the_next_flush():
    """A recovery resumes after a checkpoint's step: its report must not wait in the queue."""
    sent = threading.Event()
    publisher = BatchPublisher(lambda data: sent.set(), interval=30.0)
    try:
        record = {"process": 0, "seq": 0, "step": 3, "time": 0.0, "checkpoint": "ckpt/3", "metrics": {}}
        publisher.add(dict(record))
        assert not sent.wait(0.05)  # an ordinary record waits for the flush (30 s here)
        publisher.add(dict(record, seq=1), now=True)
        assert sent.wait(5.0)
    finally:
        publisher.close()



def test_a_checkpoints_report_is_plain_json_on_the_host():
    class Opaque:
        def __repr__(self):
            return "<opaque>"

    got = host_metrics({"loss": jnp.float32(0.5), "ids": np.arange(3), "n": 2, "what": Opaque()})
    assert got == {"loss": 0.5, "ids": [0, 1, 2], "n": 2, "what": "<opaque>"}
    assert type(got["ids"][0]) is int


def test_the_report_a_checkpoint_keeps_is_read_back_only_for_its_own_step(tmp_path):
    step_dir = tmp_path / "checkpoints" / "6"
    (step_dir / "jaxnb").mkdir(parents=True)
    manifest = step_dir / "jaxnb" / "metadata"
    checkpoint = Checkpoint(6, str(step_dir))
    assert saved_report(checkpoint) is None  # an older jaxnb's: no report
    manifest.write_text(json.dumps({"format": "x", "report": {"step": 6, "time": 1.5,
                                                              "metrics": {"loss": 0.25}}}))
    assert saved_report(checkpoint) == {"step": 6, "time": 1.5, "metrics": {"loss": 0.25}}
    assert saved_report(Checkpoint(6, str(step_dir), user_managed=True)) is None
    assert saved_report(Checkpoint(7, str(step_dir))) is None  # not this step's
    manifest.write_text('{"report": {"step": 6, "metrics": [1]}}')
    assert saved_report(checkpoint) is None
    manifest.write_text("not json")
    assert saved_report(checkpoint) is None
