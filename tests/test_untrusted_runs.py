"""Nothing jaxnb reads back from a run folder can run code (a real 2-process cluster): no file
that jaxnb writes under ``DIR/RUN`` is a pickle stream, and a pickle planted in any file of a
run (checkpoints, data positions, metadata) never runs on ``--resume`` nor in ``restore()``."""

from __future__ import annotations

import base64
import functools
import inspect
import json
import os
import pickle
import pickletools
import shutil
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output
from support import state_classes

#: Starts engines, kernels or a browser: not in `bash dev test fast`.
pytestmark = pytest.mark.engines

#: Run on the engines first, as a notebook's %%jax_cluster cell would: the state's classes.
SETUP_CELL = inspect.getsource(state_classes) + """
import numpy as np
untrusted_rows = np.arange(40, dtype=np.float32)
"""


@pytest.fixture(scope="module")
def engines(make_cluster):
    """This module's own cluster: its planted runs fail on purpose."""
    cluster = make_cluster(2)
    cluster.run(SETUP_CELL)
    return cluster


def rich(config):
    """A training loop whose checkpoint holds every kind of container: dicts, tuples, None, a
    NamedTuple and a dataclass (defined on the engines), Flax NNX state, Optax state, PRNG keys;
    and a dataset whose position is saved. Resumed, it restores without a target and reports
    what came back."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    import __main__
    import jaxnb

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.linear = nnx.Linear(2, 3, rngs=rngs)
            self.dropout = nnx.Dropout(0.5, rngs=rngs)

    rank = jaxnb.get_context().get_world_rank()
    rows = iter(jaxnb.get_dataset_shard("rows").iter_batches(batch_size=2))
    ck = jaxnb.get_checkpoint()
    if ck is not None:
        state = ck.restore()
        kinds = {k: type(v).__name__ for k, v in state.items()}
        jaxnb.report({"step": ck.step + 1, "kinds": kinds, "position": int(state["loader"].position),
                      "rows": next(rows)["data"].tolist()})
        return
    params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
    for step in range(1, config["steps"] + 1):
        batch = next(rows)
        state = {
            "moments": __main__.Moments(jnp.full(2, float(step)), (step, None)),
            "loader": __main__.Loader(position=10 * rank + step, seed=jax.random.key(rank)),
            "model": nnx.state(Model(nnx.Rngs(step, dropout=step + 1))),
            "opt": optax.adam(0.1).init(params),
            "rows": batch["data"],
            "names": ("run", step, None),
        }
        jaxnb.report({"step": step}, checkpoint=state if step == config["steps"] else None)


# ---- what counts as a pickle -----------------------------------------------------------------


def is_pickle(data: bytes) -> bool:
    """Whether ``data`` starts with a whole pickle stream (what ``pickle.loads`` would run)."""
    if len(data) < 2:
        return False
    try:
        for opcode, _, _ in pickletools.genops(data):
            if opcode.name == "STOP":
                return True
    except Exception:
        return False
    return False


def strings(doc: object):
    """Every string in a JSON document."""
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield k
            yield from strings(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from strings(v)


def json_documents(data: bytes) -> list:
    """The JSON documents of a file (a JSON file, or one a line), or [] when it holds none."""
    try:
        return [json.loads(data)]
    except ValueError:
        pass
    try:
        return [json.loads(line) for line in data.splitlines() if line.strip()]
    except ValueError:
        return []


def pickled_files(root: Path) -> list[str]:
    """Files under ``root`` that are a pickle stream or hold one in a JSON string (base64)."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        inside = [s for doc in json_documents(data) for s in strings(doc) if len(s) > 8]
        decoded = []
        for s in inside:
            try:
                decoded.append(base64.b64decode(s, validate=True))
            except ValueError:
                continue
        if is_pickle(data) or any(is_pickle(d) for d in decoded):
            found.append(str(path.relative_to(root)))
    return found


def test_the_pickle_finder_finds_pickles(tmp_path):
    (tmp_path / "raw").write_bytes(pickle.dumps({"a": 1}))
    (tmp_path / "old0").write_bytes(pickle.dumps([1], protocol=0))
    (tmp_path / "in_json").write_text(json.dumps({"t": base64.b64encode(pickle.dumps(len)).decode()}))
    (tmp_path / "json").write_text(json.dumps({"a": [1, "text", None]}))
    (tmp_path / "lines").write_text('{"a": 1}\n{"b": 2}\n')
    (tmp_path / "binary").write_bytes(bytes(range(256)))
    assert pickled_files(tmp_path) == ["in_json", "old0", "raw"]


def test_no_file_that_a_run_writes_is_a_pickle_and_its_state_comes_back_without_a_target(
        engines, tmp_path):
    first = engines.train(rich, {"steps": 3}, name="rich", storage=tmp_path,
                          datasets={"rows": "untrusted_rows"})
    assert first.error is None and first.checkpoint.step == 3
    again = engines.train(rich, {"steps": 3}, name="rich", storage=tmp_path,
                          datasets={"rows": "untrusted_rows"}, resume=True)
    assert again.error is None, again.error
    assert again.history[-1]["kinds"] == {
        "moments": "Moments", "loader": "Loader", "model": "State",
        "opt": "tuple", "rows": "ndarray", "names": "tuple"}
    assert again.history[-1]["position"] == 3  # process 0's own value
    assert again.history[-1]["rows"] == [12.0, 14.0]  # the 4th batch of process 0 (rows 0, 2, ...)
    files = [p for p in (tmp_path / "rich").rglob("*") if p.is_file()]
    assert any("datasets" in p.parts for p in files) and any("checkpoints" in p.parts for p in files)
    assert pickled_files(tmp_path / "rich") == []


# ---- a pickle planted in every file -----------------------------------------------------------


class Plant:
    """Unpickled, it creates the file ``marker``: the proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_field(path: Path, key: str, text: str) -> None:
    """Set field ``key`` of the JSON document (or of each JSON line) in ``path`` to ``text``."""
    data = path.read_bytes()
    try:
        docs, lines = [json.loads(data)], False
    except ValueError:
        docs, lines = json_documents(data), True
    for doc in docs:
        if isinstance(doc, dict) and key in doc:
            doc[key] = text
    path.write_text("".join(json.dumps(d) + "\n" for d in docs) if lines else json.dumps(docs[0]))


def plantings(root: Path, payload: bytes):
    """(file, where, plant) for each way to plant ``payload`` in each file under ``root``: the
    whole file, and in JSON files each top-level field (base64, as a pickle kept in JSON is)."""
    text = base64.b64encode(payload).decode()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = str(path.relative_to(root))
        yield name, "the whole file", lambda p: p.write_bytes(payload)
        docs = json_documents(path.read_bytes())
        for key in sorted({k for d in docs if isinstance(d, dict) for k in d}):
            yield name, f"field {key!r}", functools.partial(plant_field, key=key, text=text)


def test_a_pickle_planted_in_any_file_of_a_run_never_runs(engines, tmp_path):
    storage, marker = tmp_path / "runs", tmp_path / "planted-pickle-ran"
    made = engines.train(rich, {"steps": 2}, name="planted", storage=storage,
                         datasets={"rows": "untrusted_rows"})
    assert made.error is None
    run, pristine = storage / "planted", tmp_path / "pristine"
    shutil.copytree(run, pristine)
    ran, outcomes = [], {}
    for name, where, plant in plantings(pristine, pickle.dumps(Plant(marker))):
        shutil.rmtree(run)
        shutil.copytree(pristine, run)
        plant(run / name)
        try:
            with capture_output():
                result = engines.train(rich, {"steps": 2}, name="planted", storage=storage,
                                       datasets={"rows": "untrusted_rows"}, resume=True)
            said = "resumed" if result.error is None else str(result.error)
        except Exception as exc:  # refused: what the notebook says
            said = f"{type(exc).__name__}: {exc}"
        outcomes[f"{name}: {where}"] = said.splitlines()[0][:200]
        if marker.exists():
            ran.append(f"{name}: {where}")
            marker.unlink()
    assert len(outcomes) > 10, outcomes
    assert ran == [], {w: outcomes[w] for w in ran}
    Path(os.environ.get("JAXNB_PLANTED_LOG", os.devnull)).write_text(
        "\n".join(f"{w}: {o}" for w, o in outcomes.items()))
