"""A checkpoint's pytree structure kept as data (JSON) and rebuilt without running code that the
file names (milliseconds, one process, no engines)."""

from __future__ import annotations

import collections
import dataclasses
import json
import pickle
import sys

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from support.state_classes import Loader, Moments

from jaxnb._engine.checkpoint import structure as st
from jaxnb._engine.checkpoint import typed_json


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: object


@flax.struct.dataclass
class TrainState:
    params: object
    name: str = flax.struct.field(pytree_node=False, default="run")


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Registered:
    x: object
    width: int = dataclasses.field(metadata={"static": True}, default=3)


class Model(nnx.Module):
    def __init__(self, rngs):
        self.linear = nnx.Linear(2, 3, rngs=rngs)
        self.dropout = nnx.Dropout(0.5, rngs=rngs)


class Own:
    """A class with pytree functions of its own: rebuilding it would run its code."""

    made = 0

    def __init__(self, x):
        Own.made += 1
        self.x = x


jax.tree_util.register_pytree_node(Own, lambda o: ((o.x,), None), lambda _, c: Own(c[0]))


def rich_tree():
    params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
    return {
        "moments": Moments(np.arange(3), (1, None)),
        "loader": Loader(3, jax.random.key(0)),
        "frozen": Frozen([1.5, "x"]),
        "state": TrainState(params, name="mine"),
        "registered": Registered(jnp.ones(1), width=5),
        "ordered": collections.OrderedDict(b=1, a=2),
        "counts": collections.defaultdict(list, {1: 2, 3: 4}),
        "optax": optax.adam(0.1).init(params),
        "nnx": nnx.state(Model(nnx.Rngs(0, dropout=1))),
        "tuple_keys": {(1, "k"): 1.5, (0, "z"): 2},
        "nothing": None,
        "empty": ((), [], {}),
    }


def through_json(tree):
    """The tree as :func:`describe` writes it, read back from JSON text and rebuilt."""
    _, leaves, treedef = st.flatten(tree)
    text = json.dumps(st.describe(tree))
    return st.rebuild(json.loads(text), leaves), treedef, text


def test_every_container_jaxnb_knows_comes_back_from_json():
    tree = rich_tree()
    back, treedef, _ = through_json(tree)
    assert jax.tree.structure(st.expand(back)) == treedef  # the very same structure
    assert jax.tree.structure(back) == jax.tree.structure(tree)
    assert type(back["moments"]) is Moments and back["moments"].count == (1, None)
    assert type(back["loader"]) is Loader and back["loader"].position == 3
    assert back["frozen"] == Frozen([1.5, "x"])
    assert type(back["state"]) is TrainState and back["state"].name == "mine"
    assert type(back["registered"]) is Registered and back["registered"].width == 5
    assert list(back["ordered"]) == ["b", "a"] and type(back["ordered"]) is collections.OrderedDict
    assert back["counts"].default_factory is list and back["counts"][1] == 2
    assert type(back["optax"][0]) is type(tree["optax"][0])
    assert type(back["nnx"]) is nnx.State
    assert type(back["nnx"]["linear"]["kernel"]) is type(tree["nnx"]["linear"]["kernel"])
    assert back["tuple_keys"] == {(1, "k"): 1.5, (0, "z"): 2}
    assert back["nothing"] is None and back["empty"] == ((), [], {})
    for a, b in zip(st.flatten(back)[1], st.flatten(tree)[1], strict=True):
        assert a is b


def test_the_description_is_plain_json_without_a_pickle():
    _, _, text = through_json(rich_tree())
    assert b"\x80" not in text.encode() and "pickle" not in text
    assert '"class": "tests_marker"' not in text
    assert json.loads(text)["type"] == "dict"


def test_a_class_defined_inside_a_function_asks_for_a_target():
    @dataclasses.dataclass
    class Local:
        a: object

    _, leaves, _ = st.flatten({"x": Local(1)})
    with pytest.raises(st.StructureError) as info:
        st.rebuild(st.describe({"x": Local(1)}), leaves)
    assert str(info.value) == (
        f"the saved structure has a class {__name__}.test_a_class_defined_inside_a_function_asks_"
        "for_a_target.<locals>.Local, which is defined inside a function")


def test_a_class_with_its_own_pytree_functions_is_not_rebuilt():
    Own.made = 0
    tree = {"own": Own(jnp.ones(1))}
    doc = st.describe(tree)
    made = Own.made
    with pytest.raises(st.StructureError) as info:
        st.rebuild(doc, jax.tree.leaves(tree))
    assert str(info.value) == (f"the saved structure has a class {__name__}.Own, whose pytree "
                               "functions are its own code")
    assert Own.made == made  # its code never ran


def test_a_library_node_whose_static_data_is_not_data_is_not_rebuilt():
    var = nnx.Param(jnp.ones(2), hook=lambda x: x)  # a function in the variable's metadata
    doc = st.describe({"v": var})
    assert doc["children"][0]["type"] == "opaque"
    with pytest.raises(st.StructureError):
        st.rebuild(doc, jax.tree.leaves({"v": var}))


def _tampered(kind: str, name: str, **extra) -> dict:
    return {"type": kind, "class": name, "children": [st.LEAF], **extra}


@pytest.mark.parametrize("doc", [
    _tampered("namedtuple", "os:system", fields=["a"]),
    _tampered("namedtuple", "builtins:eval", fields=["a"]),
    _tampered("dataclass", "subprocess:Popen", fields=["args"], static={}),
    _tampered("dataclass", "builtins:exec", fields=["a"], static={}),
    _tampered("node", "builtins:eval", aux={"t": "none", "v": None}),
    _tampered("node", "os:system", aux={"t": "str", "v": "touch /tmp/x"}),
    _tampered("opaque", "os:system"),
    _tampered("namedtuple", "antigravity:Fly", fields=["a"]),
    _tampered("namedtuple", "os.path:join.__globals__", fields=["a"]),
    {"type": "defaultdict", "factory": "eval", "keys": [{"t": "int", "v": 1}], "children": [st.LEAF]},
    {"type": "dict", "keys": [{"t": "pickle", "v": "gASVAAAA"}], "children": [st.LEAF]},
    {"type": "dict", "keys": [], "children": [st.LEAF]},
    {"type": "tuple"},
    "cos\nsystem\n(S'touch /tmp/x'\ntR.",
    None,
])
def test_a_tampered_structure_is_refused_in_one_line_without_running_anything(doc):
    before = set(sys.modules)
    with pytest.raises(st.StructureError) as info:
        st.rebuild(doc, [np.zeros(1)])
    assert "\n" not in str(info.value)
    assert set(sys.modules) == before  # nothing imported (antigravity would open a browser)


def test_a_namedtuple_of_other_fields_is_refused():
    doc = {"type": "namedtuple", "class": f"{Moments.__module__}:Moments", "fields": ["a", "b"],
           "children": [st.LEAF, st.LEAF]}
    with pytest.raises(st.StructureError) as info:
        st.rebuild(doc, [1, 2])
    assert str(info.value) == (f"class {Moments.__module__}.Moments here is not the NamedTuple saved "
                               "(fields a, b)")


def test_a_class_not_defined_here_names_what_to_import():
    doc = {"type": "namedtuple", "class": "no_such_module_here:State", "fields": ["a"],
           "children": [st.LEAF]}
    with pytest.raises(st.StructureError) as info:
        st.rebuild(doc, [1])
    assert str(info.value) == ("the saved structure has a class no_such_module_here.State, which "
                               "is not defined here (import no_such_module_here first)")


@pytest.mark.parametrize("value", [None, True, 7, 2**70, -0.1, float("inf"), 1 + 2j, "é", b"\0x",
                                   (1, [2, (3,)]), {"a": (1, None), 2: b"x"}])
def test_typed_json_round_trips_data_exactly(value):
    back = typed_json.from_json(json.loads(json.dumps(typed_json.to_json(value))))
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize("value", [object(), Loader(1, 2), print, np.float32(1), {1, 2}])
def test_typed_json_refuses_what_is_not_data(value):
    with pytest.raises(typed_json.NotData):
        typed_json.to_json(value)


def test_typed_json_reads_no_pickle():
    class Plant:
        def __reduce__(self):
            return (print, ("planted",))

    import base64

    payload = base64.b64encode(pickle.dumps(Plant())).decode()
    for doc in [{"t": "pickle", "v": payload}, {"t": "bytes", "v": "not base64!"},
                {"t": "dict", "v": [[{"t": "list", "v": []}, {"t": "int", "v": 1}]]}]:
        with pytest.raises(ValueError):
            typed_json.from_json(doc)
    assert typed_json.from_json({"t": "bytes", "v": payload}) == pickle.dumps(Plant())  # bytes, as saved
